"""``serve run configs/local.yaml``: Ray Serve's own command, the way fleet operators start a
profile (README "Profiles": each profile is a Ray Serve config).

A new user's shell (none of the test session's Ray or Serve settings, so Serve's default proxy
mode, not ``horizon serve``'s fast mode), Ray started by ``serve run`` itself with its own
resource detection, the real embedded default. Then an OpenAI SDK chat, a stream and a tool
call on the real engine, and Ctrl-C. Runs in the ``firstrun`` pytest process, after the README's
quick start has stopped: ``serve run`` starts a local Ray only when none is running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from test_first_run import BASE, ROOT, port_open, started_until_ready

SERVE = str(ROOT / ".venv" / "bin" / "serve") if (ROOT / ".venv" / "bin" / "serve").exists() \
    else str(Path(sys.executable).with_name("serve"))
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}

pytestmark = [pytest.mark.e2e, pytest.mark.firstrun]


def health() -> dict | None:
    try:
        return httpx.get(f"{BASE}/health", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return None


@pytest.fixture(scope="module")
def serve_run(tmp_path_factory):
    """``serve run configs/local.yaml`` until /health says ready; yields (process, log path)."""
    assert not port_open(8000), "port 8000 must be free: the quick start's Ctrl-C frees it"
    log_path = tmp_path_factory.mktemp("serve-run") / "serve-run.log"
    with started_until_ready([SERVE, "run", "configs/local.yaml"], log_path,
                             lambda: (health() or {}).get("status") == "ready",
                             "serve run") as (proc, ready_s):
        print(f"\nserve run ready after {ready_s:.0f} s")
        yield proc, log_path


@pytest.fixture(scope="module")
def client(serve_run) -> OpenAI:
    return OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=600)


def test_the_profile_serves_every_deployment_on_the_real_engine(serve_run):
    body = health()
    assert body is not None and body["profile"] == "local"
    for alias in ("k2", "bge-m3"):
        assert body["models"][alias]["status"] == "HEALTHY", body["models"][alias]


def test_sdk_chat_stream_and_a_tool_call(client):
    reply = client.chat.completions.with_raw_response.create(
        model="vllm-sr/auto", max_tokens=16,
        messages=[{"role": "user", "content": "Write a Python function that reverses a list."}])
    assert reply.parse().choices[0].message.content
    assert reply.headers["x-vsr-selected-decision"]
    chunks = list(client.chat.completions.create(
        model="k2", max_tokens=8, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Count to five."}]))
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    # The engine's tool-call parser is configured by the profile, under serve run as well.
    called = client.chat.completions.create(
        model="qwen-72b", temperature=0, max_tokens=48, tools=[WEATHER], tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    [call] = called.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and "city" in call.function.arguments


def test_ctrl_c_stops_serve_run_and_frees_the_port(serve_run):
    proc, log_path = serve_run
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=180)
    deadline = time.monotonic() + 60
    while port_open(8000) and time.monotonic() < deadline:
        time.sleep(1)
    assert not port_open(8000), log_path.read_text()[-3000:]
    # The Ray that serve run started goes with it (the next suite starts its own).
    while ray_running() and time.monotonic() < deadline:
        time.sleep(1)
    assert not ray_running(), "serve run's Ray was stopped too"


def ray_running() -> bool:
    return bool(subprocess.run(["pgrep", "-f", "ray/raylet"], capture_output=True, text=True).stdout.strip())
