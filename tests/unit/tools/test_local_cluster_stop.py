"""horizon serve / horizon stop stop their own Ray cluster and nothing else (never `ray stop`,
which stops every Ray cluster of the user on the machine)."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import psutil
import pytest

from serve_app.tools import local_cluster as lc
from serve_app.tools import status

from listeners import listening

# A stand-in "GCS server" with the arguments Ray gives it, whose child stands in for a worker.
FAKE_GCS = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "time.sleep(60)")


def _start(session: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", FAKE_GCS, f"--gcs_server_port={port}",
                             f"--session-name={session}"])
    time.sleep(0.5)
    return proc


def test_finds_one_cluster_by_session_or_gcs_port_with_descendants_and_stops_only_it():
    ours = _start("session_2099-01-01_00-00-00_000000_1", 61234)
    theirs = _start("session_2099-01-01_00-00-00_000000_2", 61235)
    # Someone reading one of our session's logs is not part of the cluster.
    reader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               "/tmp/ray/session_2099-01-01_00-00-00_000000_1/logs/raylet.out"])
    try:
        by_session = lc.cluster_pids("/tmp/ray/session_2099-01-01_00-00-00_000000_1")
        by_port = lc.cluster_pids("", 61234)
        assert ours.pid in by_session and len(by_session) == 2  # the process and its child
        assert by_port == by_session
        assert theirs.pid not in by_session and reader.pid not in by_session
        assert lc.cluster_pids("", 1) == []
        lc.stop_processes(by_session, timeout_s=5)
        assert ours.wait(timeout=10) is not None
        assert theirs.poll() is None
    finally:
        for proc in (ours, theirs, reader):
            proc.kill()
        lc.stop_processes(lc.cluster_pids("", 61235), timeout_s=5)



def test_a_process_whose_parent_died_is_found_by_the_session_logs_it_writes(tmp_path):
    # Found in a run: with Ray's GCS killed, the raylet ended a minute later, but a vLLM engine
    # core (its replica gone) and Ray's two agents (renamed ``ray::DashboardAgent``) went on,
    # the engine with 1.4 GB resident. Their command lines name no session; their logs do.
    session = "session_2099-01-01_00-00-00_000000_3"
    log = tmp_path / session / "logs" / "worker-1.out"
    log.parent.mkdir(parents=True)
    log.write_text("")
    with open(log, "a") as out:   # started as Ray starts a worker: output into the session's logs
        writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=out, stderr=out)
    reader = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(60)",
                               str(log)])
    # A driver connected to the cluster (a user's notebook) writes its core log there: it stays.
    driver = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'a'); time.sleep(60)",
                               str(log.parent / "python-core-driver-01000000_4242.log")])
    time.sleep(0.5)
    try:
        found = lc.cluster_pids(str(tmp_path / session))
        assert writer.pid in found and reader.pid not in found and driver.pid not in found
        assert writer.pid not in lc.cluster_pids("/tmp/ray/session_2099-01-01_00-00-00_000000_4")
    finally:
        for proc in (writer, reader, driver):
            proc.kill()


# A stand-in Ray process: writes "<name> <monotonic time>" to the log when SIGTERM reaches it, and
# exits after ``delay`` s (the raylet, stopping its workers, takes a while).
FAKE_RAY_PROCESS = ("import signal, sys, time\n"
                    "def stop(*_):\n"
                    "    open(sys.argv[1], 'a').write(f'{sys.argv[2]} {time.monotonic()}\\n'); time.sleep(float(sys.argv[3])); sys.exit(0)\n"
                    "signal.signal(signal.SIGTERM, stop)\n"
                    "time.sleep(60)\n")


def test_a_cluster_stops_in_ray_stops_order_raylet_first_gcs_last(tmp_path):
    # Sent SIGTERM all at once, the GCS of the embedded default waited out the whole grace.
    log = tmp_path / "signals.log"
    procs = {name: subprocess.Popen([f"/opt/ray/{program}", "-c", FAKE_RAY_PROCESS, str(log), name, delay],
                                    executable=sys.executable)
             for name, program, delay in (("gcs", "gcs_server", "0"), ("worker", "python", "0"),
                                          ("raylet", "raylet", "0.5"))}
    time.sleep(0.5)
    try:
        started = time.monotonic()
        lc.stop_cluster([p.pid for p in procs.values()], grace_s=15)
        assert time.monotonic() - started < 5           # each step ends when its processes do
        order = [line.split()[0] for line in log.read_text().splitlines()]
        assert order == ["raylet", "worker", "gcs"]
        assert all(p.wait(timeout=5) == 0 for p in procs.values())
    finally:
        for p in procs.values():
            p.kill()


# A stand-in raylet whose GCS is gone: it ignores SIGTERM.
DEAF_RAYLET = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def test_a_cluster_whose_gcs_is_gone_stops_in_one_step(tmp_path, monkeypatch):
    """With its GCS gone the raylet ignores SIGTERM (measured: the embedded default's stop
    waited out the raylet's grace, then the rest's): every process gets SIGTERM at once, and
    what still runs after the grace is killed."""
    monkeypatch.setattr(lc, "GCS_GONE_GRACE_S", 1.0)
    log = tmp_path / "signals.log"
    worker = subprocess.Popen(["/opt/ray/python", "-c", FAKE_RAY_PROCESS, str(log), "worker", "0"],
                              executable=sys.executable)
    raylet = subprocess.Popen(["/opt/ray/raylet", "-c", DEAF_RAYLET], executable=sys.executable)
    time.sleep(0.5)
    try:
        started = time.monotonic()
        lc.stop_cluster([raylet.pid, worker.pid], grace_s=15, gcs_alive=False)
        elapsed = time.monotonic() - started
        [(name, signalled_at)] = [line.split() for line in log.read_text().splitlines()]
        assert name == "worker" and float(signalled_at) - started < 2   # not after the raylet's 5-s grace
        # Both are gone (stop_cluster reaped them), the deaf raylet killed once the grace ran out.
        assert not psutil.pid_exists(raylet.pid) and not psutil.pid_exists(worker.pid)
        assert 1.0 <= elapsed < 5
    finally:
        for proc in (raylet, worker):
            proc.kill()


def test_status_of_a_stopped_cluster_says_nothing_runs_at_once(tmp_path, monkeypatch, capsys):
    """A record left by a cluster that stopped or crashed: ``horizon status`` must not hand its
    address to ray.init, which retries a dead GCS for minutes."""
    monkeypatch.setenv(lc.STATE_DIR_ENV, str(tmp_path))
    dead = f"127.0.0.1:{lc.free_port()}"                 # nothing listens there
    lc.ServeState(pid=1, config="configs/local.yaml", host="127.0.0.1", port=lc.free_port(),
                  route_prefix="/", app_name="horizon", gcs_address=dead).save()
    started = time.monotonic()
    code = status.run(argparse.Namespace(address=None, app=None))
    assert code == 1 and time.monotonic() - started < 10
    assert f"nothing is running: the Ray cluster at {dead} does not answer" in capsys.readouterr().out


class FakeGcsProcess:
    """What psutil.process_iter yields for a GCS server, with the arguments Ray gives it."""

    pid = 4242

    def __init__(self, status: str, port: int):
        self.info = {"name": "gcs_server", "status": status,
                     "cmdline": ["gcs_server", f"--gcs_server_port={port}", "--node-ip-address=127.0.0.1"]}


def test_a_gcs_server_that_no_longer_answers_is_not_a_running_cluster(monkeypatch):
    with listening() as live_port:
        dead_port = lc.free_port()
        zombie = FakeGcsProcess(psutil.STATUS_ZOMBIE, live_port)
        stopping = FakeGcsProcess(psutil.STATUS_SLEEPING, dead_port)
        running = FakeGcsProcess(psutil.STATUS_SLEEPING, live_port)
        for procs, expected in (([zombie], None), ([stopping], None),
                                ([stopping, running], f"127.0.0.1:{live_port}")):
            monkeypatch.setattr(psutil, "process_iter", lambda attrs=None, procs=procs: iter(procs))
            assert lc._gcs_process_address() == expected


def test_answers_reads_plain_and_ray_client_addresses():
    with listening() as port:
        assert lc.answers(f"127.0.0.1:{port}") and lc.answers(f"ray://127.0.0.1:{port}")
    assert not lc.answers(f"127.0.0.1:{lc.free_port()}") and not lc.answers("no-port-here")


def test_answers_reads_a_bracketed_ipv6_address():
    try:
        with listening(socket.AF_INET6, "::1") as port:
            assert lc.answers(f"[::1]:{port}")
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback on this machine: {exc}")


def test_a_stopped_cluster_is_forgotten_like_ray_stop_does_and_no_other(tmp_path, monkeypatch):
    # Ray's record of the latest cluster (what `ray start` writes and `ray.init()` / `serve run`
    # follow). Left naming a stopped cluster, a later `serve run` times out on its GCS.
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    record = tmp_path / "ray" / "ray_current_cluster"
    record.parent.mkdir()
    record.write_text("192.0.2.2:6379")
    lc.forget_cluster_address(6380)                 # another cluster's port: left alone
    assert record.read_text() == "192.0.2.2:6379"
    lc.forget_cluster_address(None)
    assert record.exists()
    lc.forget_cluster_address(lc.gcs_port_of("127.0.0.1:6379"))
    assert not record.exists()
    lc.forget_cluster_address(6379)                 # nothing recorded: nothing to do
