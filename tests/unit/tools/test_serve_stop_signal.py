"""Ctrl-C (or SIGTERM) reaches `horizon serve`'s clean shutdown wherever it lands.

Found in a CI run: the SIGINT landed inside ``serve.status()`` of the progress loop, whose
``except Exception`` (for a controller slow to answer) caught the stop signal's exception; its
empty message then raised IndexError, and `horizon serve` exited 1 ("failed") instead of 0.
"""

from __future__ import annotations

import threading
import time

import pytest

from serve_app.tools import local_cluster as lc
from serve_app.tools import serve as serve_cmd

from listeners import listening

_real_answers = lc.answers
STATE = lc.ServeState(pid=0, config="configs/local.yaml", host="127.0.0.1", port=8000,
                      route_prefix="/", app_name="horizon")


@pytest.fixture(autouse=True)
def _gcs_answers(monkeypatch):
    """The cluster's GCS answers unless a test says otherwise."""
    monkeypatch.setattr(lc, "answers", lambda address: True)


def test_a_stop_signal_inside_the_status_call_is_not_taken_for_a_slow_controller(monkeypatch):
    def status():
        serve_cmd._on_sigterm(2, None)   # the handler runs inside the call, as a signal does
    monkeypatch.setattr(serve_cmd.serve, "status", status)
    with pytest.raises(serve_cmd._Stop):
        serve_cmd._watch(STATE, started=0.0, ready_timeout=600, non_blocking=False)
    assert not issubclass(serve_cmd._Stop, Exception)


def test_a_controller_error_without_a_message_is_named_by_its_type(monkeypatch, capsys):
    def status():
        raise RuntimeError("")
    monkeypatch.setattr(serve_cmd.serve, "status", status)
    monkeypatch.setattr(serve_cmd.time, "sleep", lambda s: None)
    monkeypatch.setattr(serve_cmd, "get_health", lambda url: None)
    assert serve_cmd._watch(STATE, started=0.0, ready_timeout=1e9, non_blocking=False) == 1
    out = capsys.readouterr().out
    assert "Serve's controller did not answer: RuntimeError" in out and "giving up" in out



OWN_NODE = "node-of-this-machine"


def _record_shutdown(monkeypatch, nodes) -> list[str]:
    """Stub every step of ``shutdown`` to record the steps taken, in order; ``nodes``: what
    ``ray.nodes()`` answers (an exception: raised)."""
    steps: list[str] = []

    def ray_nodes():
        if isinstance(nodes, Exception):
            raise nodes
        return nodes
    monkeypatch.setattr(serve_cmd.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(serve_cmd.ray, "nodes", ray_nodes)
    def ray_shutdown():
        # Beside the stop (another thread) its place among the steps is not fixed.
        main = threading.current_thread() is threading.main_thread()
        steps.append("ray.shutdown" if main else "ray.shutdown (beside)")

    def stop_ray(*args, gcs_alive=True):
        steps.append("stop ray" if gcs_alive else "stop ray (GCS gone)")
    monkeypatch.setattr(serve_cmd.ray, "shutdown", ray_shutdown)
    monkeypatch.setattr(serve_cmd.serve, "delete", lambda name: steps.append(f"delete {name}"))
    monkeypatch.setattr(serve_cmd, "stop_ray", stop_ray)
    monkeypatch.setattr(lc, "haproxy_pids", lambda node_id: [4242])
    monkeypatch.setattr(lc, "stop_processes", lambda pids: steps.append(f"stop {pids}"))
    monkeypatch.setattr(lc, "wait_port_free", lambda host, port, timeout_s: True)
    monkeypatch.setattr(lc.ServeState, "clear", staticmethod(lambda: steps.append("forget state")))
    return steps


def _in_order(steps: list[str]) -> list[str]:
    """The steps whose order is fixed, once a disconnect beside the stop has been seen."""
    assert steps.count("ray.shutdown (beside)") == 1, steps
    return [step for step in steps if step != "ray.shutdown (beside)"]


def _state(**changes) -> lc.ServeState:
    return lc.ServeState(**{**STATE.__dict__, "node_id": OWN_NODE, **changes})


def _node(node_id: str, alive: bool = True) -> dict:
    return {"NodeID": node_id, "Alive": alive}


def test_stopping_a_cluster_it_started_skips_the_ingress_drain_of_an_application_delete(monkeypatch, capsys):
    # Deleting the application first would keep the ingress replica draining for 30 s (for an
    # external load balancer) before the cluster, HAProxy included, is stopped anyway. A node
    # that joined once and is gone does not count.
    steps = _record_shutdown(monkeypatch, [_node(OWN_NODE), _node("left-long-ago", alive=False)])
    serve_cmd.shutdown(_state())
    assert steps == ["ray.shutdown", "stop ray", "stop [4242]", "forget state"]
    assert "horizon: stopped in" in capsys.readouterr().out


def test_the_stop_removes_haproxy_files_where_the_start_put_them(monkeypatch):
    """From another shell the stop's environment may name no folder, or another one: the
    serve state's folder is the one the cluster's HAProxy wrote to."""
    _record_shutdown(monkeypatch, [_node(OWN_NODE)])
    removed = []
    monkeypatch.setattr(lc, "remove_haproxy_files", lambda node_id, env=None, base=None: removed.append((node_id, base)))
    serve_cmd.shutdown(_state(haproxy_dir="/tmp/haproxy-abc123"))
    serve_cmd.shutdown(_state())
    assert removed == [(OWN_NODE, "/tmp/haproxy-abc123"), (OWN_NODE, None)]


@pytest.mark.parametrize("nodes", [[_node(OWN_NODE), _node("joined-from-another-machine")],
                                   RuntimeError("GCS did not answer")], ids=["joined", "unknown"])
def test_with_other_machines_nodes_or_unknown_serve_stops_the_replicas_before_the_cluster(monkeypatch, nodes):
    # Stopping this machine's processes would leave the replicas on the other nodes running.
    steps = _record_shutdown(monkeypatch, nodes)
    serve_cmd.shutdown(_state())
    assert steps == ["delete horizon", "ray.shutdown", "stop ray", "stop [4242]", "forget state"]


def test_stopping_on_a_cluster_it_joined_deletes_only_its_application(monkeypatch):
    steps = _record_shutdown(monkeypatch, [_node(OWN_NODE), _node("the-head")])
    serve_cmd.shutdown(_state(owns_cluster=False))
    assert steps == ["delete horizon", "ray.shutdown", "forget state"]


@pytest.mark.parametrize("owns_cluster", [True, False], ids=["started-it", "joined-it"])
def test_a_cluster_whose_gcs_is_gone_is_not_asked_and_its_processes_here_still_stop(
        monkeypatch, capsys, owns_cluster):
    monkeypatch.setattr(lc, "answers", _real_answers)
    # Ray's connect to a GCS that is gone retries for minutes (measured: over 200 s): a plain
    # TCP connect to its port, refused at once, says so first. Nothing listens on the port here.
    free_port = lc.free_port()
    steps = _record_shutdown(monkeypatch, [_node(OWN_NODE)])
    monkeypatch.setattr(serve_cmd.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(serve_cmd.ray, "init", lambda **kw: steps.append("ray.init"))
    serve_cmd.shutdown(_state(owns_cluster=owns_cluster, gcs_address=f"127.0.0.1:{free_port}"))
    expected = ["stop ray (GCS gone)", "stop [4242]", "forget state"] if owns_cluster \
        else ["forget state"]
    assert _in_order(steps) == expected
    assert "does not answer (nothing listens there)" in capsys.readouterr().out


def test_a_cluster_that_fails_to_connect_is_asked_once(monkeypatch, capsys):
    monkeypatch.setattr(lc, "answers", _real_answers)
    # The port answers but Ray's connect fails: no node list and no delete after it.
    steps = _record_shutdown(monkeypatch, [_node(OWN_NODE), _node("joined-from-another-machine")])
    attempts = []

    def init(**kwargs):
        attempts.append(kwargs["address"])
        raise ConnectionError("GCS did not answer")
    monkeypatch.setattr(serve_cmd.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(serve_cmd.ray, "init", init)
    monkeypatch.setattr(lc, "use_cluster_token", lambda: None)
    with listening() as port:
        address = f"127.0.0.1:{port}"
        serve_cmd.shutdown(_state(gcs_address=address))
    assert attempts == [address]
    assert _in_order(steps) == ["stop ray (GCS gone)", "stop [4242]", "forget state"]
    assert "does not answer (GCS did not answer)" in capsys.readouterr().out


def test_watching_a_cluster_whose_gcs_died_stops_it_before_ray_ends_this_process(monkeypatch, capsys):
    # Found by hand: GCS killed, then Ctrl-C; Ray's core ended `horizon serve` a minute later
    # (exit 1) with every replica, the engine and HAProxy still running.
    monkeypatch.setattr(lc, "answers", lambda address: False)
    monkeypatch.setattr(serve_cmd.serve, "status", lambda: pytest.fail("Serve asked with its GCS gone"))
    assert serve_cmd._watch(_state(gcs_address="127.0.0.1:6379", session_dir="/tmp/ray/session_x"),
                            started=0.0, ready_timeout=600, non_blocking=False) == 1
    out = capsys.readouterr().out
    assert "GCS at 127.0.0.1:6379 stopped answering" in out and "/tmp/ray/session_x/logs/gcs_server.out" in out


def test_ctrl_c_with_the_gcs_gone_asks_ray_nothing_and_stops_the_processes(monkeypatch, capsys):
    # Connected already (Ctrl-C of a running `horizon serve`): ray.nodes() would block.
    steps = _record_shutdown(monkeypatch, RuntimeError("must not be asked"))
    monkeypatch.setattr(lc, "answers", lambda address: False)
    monkeypatch.setattr(serve_cmd.ray, "nodes", lambda: pytest.fail("ray.nodes() with the GCS gone"))
    serve_cmd.shutdown(_state(gcs_address="127.0.0.1:6379"))
    assert _in_order(steps) == ["stop ray (GCS gone)", "stop [4242]", "forget state"]


def test_with_the_gcs_gone_the_drivers_disconnect_runs_beside_the_stop(monkeypatch):
    """Ray's disconnect from a GCS that is gone waits out its own 5-s timeout (measured); the
    cluster's processes are stopped meanwhile, not after it."""
    steps = _record_shutdown(monkeypatch, RuntimeError("must not be asked"))
    monkeypatch.setattr(lc, "answers", lambda address: False)
    stopped = threading.Event()

    def slow_disconnect():
        stopped.wait(timeout=10)                 # returns once the stop has run, if it runs beside
        steps.append("ray.shutdown")

    def stop_ray(*args, gcs_alive=True):
        steps.append("stop ray" if gcs_alive else "stop ray (GCS gone)")
        stopped.set()
    monkeypatch.setattr(serve_cmd.ray, "shutdown", slow_disconnect)
    monkeypatch.setattr(serve_cmd, "stop_ray", stop_ray)
    started = time.monotonic()
    serve_cmd.shutdown(_state(gcs_address="127.0.0.1:6379"))
    assert steps == ["stop ray (GCS gone)", "stop [4242]", "ray.shutdown", "forget state"]
    assert time.monotonic() - started < 5
