"""The README's quick start, run the way a new user runs it.

The command is read from the README's "Quick start" block and run as written, in a subprocess
with a clean environment: no Ray started by the test, Ray's own resource detection (no logical
CPUs given), the real embedded default (vLLM with SmolLM2, the packaged MiniLM). Then the
README's requests, ``horizon status``, ``GET /metrics``, Ctrl-C, and nothing may be left on the
port. This module runs in its own pytest process before the shared-cluster suite (marker
``firstrun``): ``horizon serve`` refuses to start beside another Ray cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import psutil
import pytest
import yaml
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BASE = "http://127.0.0.1:8000"
HORIZON = str(ROOT / ".venv" / "bin" / "horizon") if (ROOT / ".venv" / "bin" / "horizon").exists() \
    else str(Path(sys.executable).with_name("horizon"))
# A guard against hanging forever, not the target (the README's figure is measured, not asserted).
READY_GUARD_S = 900

pytestmark = [pytest.mark.e2e, pytest.mark.firstrun]


def readme_quick_start_command() -> str:
    section = README.read_text().split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's quick start has a bash block"
    [command] = [line for line in block.group(1).splitlines() if line.strip()]
    return command


def clean_env(**extra: str) -> dict[str, str]:
    """A new user's shell: none of the test session's Ray or Serve settings."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "TERM")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(extra)
    return env


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def haproxy_running() -> bool:
    out = subprocess.run(["pgrep", "-f", "haproxy-serve"], capture_output=True, text=True)
    return bool(out.stdout.strip())


def horizon(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([HORIZON, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env or clean_env())


def _sigint_as_in_a_terminal() -> None:
    # A test run started in the background (`nohup … &`, some CI runners) ignores SIGINT and
    # its children inherit that; `serve run`, unlike `horizon serve`, relies on Python's
    # default KeyboardInterrupt for Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def started_until_ready(argv: list[str], log_path: Path, ready: Callable[[], bool],
                        what: str) -> Iterator[tuple[subprocess.Popen, float]]:
    """``argv`` from a new user's shell, its output in ``log_path``, until ``ready()``; yields
    (process, seconds to ready). Afterwards Ctrl-C (SIGKILL if that is not enough)."""
    log = log_path.open("w")
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_sigint_as_in_a_terminal)
    try:
        while time.monotonic() - started < READY_GUARD_S:
            if proc.poll() is not None:
                pytest.fail(f"{what} exited ({proc.returncode}) before ready:\n{log_path.read_text()[-4000:]}")
            if ready():
                break
            time.sleep(2)
        else:
            pytest.fail(f"{what}: not ready after {READY_GUARD_S}s:\n{log_path.read_text()[-4000:]}")
        yield proc, time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)       # what Ctrl-C in the terminal sends
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


# What a client calling GET /v1/models got while the quick start came up: (status, content
# type, body) of every answer before "ready" (a refused connection is no answer).
ANSWERS_BEFORE_READY: list[tuple[int, str, str]] = []


def _models_answer_recorded() -> None:
    try:
        r = httpx.get(f"{BASE}/v1/models", timeout=2)
    except httpx.HTTPError:
        return
    ANSWERS_BEFORE_READY.append((r.status_code, r.headers.get("content-type", ""), r.text))


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The README's command, started as written; yields (process, log path, seconds to ready).
    Meanwhile a client calls ``GET /v1/models`` every 2 s (ANSWERS_BEFORE_READY)."""
    assert not port_open(8000), "port 8000 must be free for the README's quick start"
    log_path = tmp_path_factory.mktemp("first-run") / "horizon-serve.log"

    def ready() -> bool:
        _models_answer_recorded()
        return "horizon: ready in" in log_path.read_text()

    with started_until_ready(["bash", "-c", readme_quick_start_command()], log_path, ready,
                             "the quick start") as (proc, ready_s):
        said = re.search(r"horizon: ready in (\d+) s", log_path.read_text())
        print(f"\nquick start ready after {ready_s:.0f} s with the install check; horizon serve: "
              f"{said.group(1) if said else '?'} s")
        yield proc, log_path, ready_s


@pytest.fixture(scope="module")
def client(quick_start) -> OpenAI:
    return OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=600)


def test_console_shows_each_deployment_coming_up(quick_start):
    _, log_path, _ = quick_start
    text = log_path.read_text()
    for name in ("ingress", "model-k2", "model-bge-m3"):
        assert re.search(rf"\]\s+{name}\s+HEALTHY\s+1 running", text), f"{name} reported healthy"
    assert "fits this machine" in text and "gateway ready" in text


def test_a_client_calling_before_the_application_is_deployed_gets_an_openai_error(quick_start):
    """HAProxy listens before the application is deployed and answers every path itself until
    then (the README: "nothing serves any path"): an OpenAI 404 saying K2 Horizon is starting,
    never Serve's plain-text page, which the OpenAI SDK cannot read."""
    early = [(status, kind, body) for status, kind, body in ANSWERS_BEFORE_READY if status != 200]
    assert any(status == 404 for status, _, _ in early), \
        f"no answer from HAProxy was seen before the application was deployed: {ANSWERS_BEFORE_READY}"
    for status, kind, body in early:
        assert kind.startswith("application/json"), (status, kind, body)
        error = json.loads(body)["error"]
        assert status in (404, 503), (status, body)
        if status == 404:
            assert error["code"] == "not_found" and "still starting" in error["message"], body
            assert "/v1/models" in error["message"], body


def test_readme_curl_auto_routed_chat(quick_start):
    r = httpx.post(f"{BASE}/v1/chat/completions", timeout=300, json={
        "model": "vllm-sr/auto",
        "messages": [{"role": "user", "content": "Write a Python function that reverses a list."}],
        "max_tokens": 64})
    assert r.status_code == 200, r.text
    for header in ("x-request-id", "x-vsr-selected-decision", "x-vsr-selected-model", "x-vsr-task-type",
                   "x-vsr-confidence", "x-vsr-routing-ms"):
        assert header in r.headers
    assert r.json()["choices"][0]["message"]["content"]


def test_readme_python_auto_chat_and_stream_with_usage(client):
    reply = client.chat.completions.create(
        model="vllm-sr/auto", max_tokens=64,
        messages=[{"role": "user", "content": "Summarise the plot of Hamlet in two lines."}])
    assert reply.choices[0].message.content
    chunks = list(client.chat.completions.create(
        model="k2", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Count to five."}]))
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_readme_embeddings_and_route(client):
    vectors = client.embeddings.create(model="bge-m3", input=["route me", "and me"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 384
    r = httpx.post(f"{BASE}/v1/route", json={"model": "vllm-sr/auto", "messages": [
        {"role": "user", "content": "Summarise the plot of Hamlet in two lines."}]})
    assert r.status_code == 200 and r.json()["decision"]


def test_readme_responses_call(client):
    answer = client.responses.create(model="vllm-sr/auto", input="Name three sorting algorithms.",
                                     max_output_tokens=64)
    assert answer.object == "response" and answer.output_text.strip() and answer.store is True
    more = client.responses.create(model="vllm-sr/auto", input="Which one is the fastest?",
                                   previous_response_id=answer.id, max_output_tokens=64)
    assert more.previous_response_id == answer.id and more.output_text.strip()


def test_readme_conversation(client):
    chat = client.conversations.create()
    client.responses.create(model="k2", conversation=chat.id, input="My name is Ada.", max_output_tokens=32)
    client.responses.create(model="k2", conversation=chat.id, input="What is my name?", max_output_tokens=32)
    items = list(client.conversations.items.list(chat.id, order="asc"))
    assert [(i.type, i.role) for i in items] == [("message", "user"), ("message", "assistant")] * 2
    assert items[2].content[0].text == "What is my name?"


def test_readme_fusion_example_as_written(client):
    """The README's Fusion call on the 2,048-token tiny judge: the panel's answers are budgeted
    into the judge's window, so it is a 200 with the whole trace."""
    reply = client.chat.completions.create(model="vllm-sr/fusion",
        messages=[{"role": "user", "content": "Is 2^61-1 prime? Explain."}],
        extra_body={"plugins": [{"id": "fusion", "model": "k2",
                                 "analysis_models": ["qwen-72b", "r1-distill", "coder"]}]})
    assert reply.choices[0].message.content
    trace = reply.model_extra["fusion"]
    assert trace["usable_responses"] == 3 and trace["failed_models"] == []
    assert trace["context_budget"]["judge_window_tokens"] == 2048
    assert [c["stage"] for c in trace["judge_calls"]] == ["analysis", "synthesis"]
    # The judge's analysis is constrained to its schema by the engine: it parses, all five keys.
    assert trace["analysis"].get("parse_failed") is not True, trace["analysis"]
    assert {"consensus", "contradictions", "partial_coverage", "unique_insights",
            "blind_spots"} <= set(trace["analysis"])


def test_horizon_status_reports_deployments_resources_and_metrics(quick_start):
    result = horizon("status", env=clean_env())
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "application horizon: RUNNING" in out
    for name in ("ingress", "model-k2", "model-bge-m3"):
        assert re.search(rf"{name}\s+HEALTHY\s+1 running", out)
    assert re.search(r"resources: CPU [\d.]+/2", out) or "resources: CPU" in out
    assert "/metrics" in out and "gateway ready" in out
    # The roll call of the ingress replicas, from the demand board every replica reports to.
    assert re.search(r"ingress: 1 replica reporting, all route with settings [0-9a-f]{12}", out), out


def test_metrics_on_the_gateway(quick_start):
    deadline = time.monotonic() + 60
    while True:
        r = httpx.get(f"{BASE}/metrics", timeout=10)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        if "ray_horizon_requests_total" in r.text or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert "ray_horizon_requests_total" in r.text


def test_unknown_model_is_404(client):
    r = httpx.post(f"{BASE}/v1/chat/completions", json={"model": "gpt-9", "messages": [
        {"role": "user", "content": "hi"}]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_ctrl_c_stops_everything_and_frees_the_port(quick_start):
    proc, log_path, _ = quick_start
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=180) == 0, log_path.read_text()[-3000:]
    assert "horizon: stopped" in log_path.read_text()
    assert not port_open(8000), "nothing listens on the README's port"
    assert not haproxy_running(), "Ray's HAProxy was stopped too"
    # Ray's record of the latest cluster is gone with it, as after `ray stop`: a later
    # `serve run` or `ray.init()` starts a new cluster instead of waiting on this one's GCS.
    from ray._private.utils import read_ray_address

    assert read_ray_address() is None
    status = horizon("status")
    assert status.returncode == 1 and "nothing is running" in status.stdout


# ---------------------------------------------------------------- bad input, no Ray started
def test_stop_with_nothing_running_says_so(tmp_path):
    result = horizon("stop", env=clean_env(HORIZON_STATE_DIR=str(tmp_path)))
    assert result.returncode == 0 and "nothing to stop" in result.stdout


def test_serve_refuses_a_taken_port_and_leaves_its_owner_alone(tmp_path):
    with socket.socket() as owner:
        owner.bind(("127.0.0.1", 0))
        owner.listen()
        port = owner.getsockname()[1]
        doc = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
        doc["http_options"]["port"] = port
        profile = tmp_path / "taken.yaml"
        profile.write_text(yaml.safe_dump(doc))
        result = horizon("serve", str(profile), timeout=60)
        assert result.returncode == 1
        assert f"port {port}" in result.stderr and "already in use" in result.stderr
        owner.settimeout(1)
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass                                     # its owner still listens


def test_serve_refuses_a_profile_this_machine_cannot_schedule(tmp_path):
    doc = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    doc["applications"][0]["args"]["models"][0]["placement"] = {"num_cpus": (os.cpu_count() or 2) + 1}
    profile = tmp_path / "too-big.yaml"
    profile.write_text(yaml.safe_dump(doc))
    started = time.monotonic()
    result = horizon("serve", str(profile), timeout=60)
    assert result.returncode == 1 and time.monotonic() - started < 60
    assert "cannot be scheduled on this machine" in result.stderr and "model-k2" in result.stderr
    validate = horizon("validate", str(profile))
    assert validate.returncode == 1 and "model-k2" in validate.stderr


# ---------------------------------------------------------------- Ray's GCS dies under it
def _session_processes(session: str) -> list[str]:
    """Command lines of the processes left of a cluster: those naming its session, and any vLLM
    engine core (no other runs in this phase)."""
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if (session in cmd and "--session" in cmd) or cmd.startswith("VLLM::EngineCore"):
            left.append(cmd[:120])
    return left


def test_when_rays_gcs_dies_horizon_serve_stops_the_whole_cluster(tmp_path):
    """Found by hand: with Ray's GCS killed, Ray's core ended `horizon serve` a minute later
    (exit 1) and left every replica, the vLLM engine and HAProxy running, the port taken."""
    from serve_app.tools.local_cluster import ServeState

    assert not port_open(8000), "port 8000 must be free: the quick start stopped its own"
    log_path = tmp_path / "horizon-serve.log"
    with started_until_ready([HORIZON, "serve", "configs/local.yaml"], log_path,
                             lambda: "horizon: ready in" in log_path.read_text(), "horizon serve") as (proc, _):
        state = ServeState.load()
        assert state is not None and state.session_dir
        session = Path(state.session_dir).name
        [gcs] = [p for p in psutil.process_iter(["name", "cmdline"])
                 if p.info["name"] == "gcs_server" and session in " ".join(p.info["cmdline"] or [])]
        gcs.kill()                                   # as the kernel's OOM killer would
        assert proc.wait(timeout=120) == 1, log_path.read_text()[-3000:]
    out = log_path.read_text()
    assert "stopped answering" in out and "horizon: stopped in" in out, out[-3000:]
    assert not port_open(8000) and not haproxy_running()
    assert _session_processes(session) == []
