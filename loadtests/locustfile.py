"""Locust traffic for K2 Horizon: the seed's OpenAI chat mix, streaming and not.

Run it through the runner (``python -m loadtests.runner --help``), which sets the environment
below, refuses non-local targets and writes the report. Directly:

    LOADTEST_STAGES='{"name":"constant","stages":[{"until_s":30,"users":4,"spawn_rate":4}]}' \\
    locust -f loadtests/locustfile.py --headless --host http://127.0.0.1:8000/sim

Environment (all optional):
  LOADTEST_STAGES        scenario JSON (loadtests.lib.scenarios.Scenario); default 30 s x 2 users
  LOADTEST_MAX_REQUESTS  stop after this many requests (default 10000)
  LOADTEST_RECORDS       append one JSON line per request here (the runner's summary input)
  LOADTEST_MIX           e.g. "chat=0.3,code=0.2,vision=0.15,reasoning=0.2,complex=0.15"
  LOADTEST_FUSION_SHARE  share of requests sent to the Fusion entry point (default 0)
  LOADTEST_STREAM_SHARE  share of streaming requests (default 0.5)
  LOADTEST_MODELS        comma-separated request ``model`` values (default vllm-sr/auto)
  LOADTEST_MAX_TOKENS    max_tokens per request (default 64; 0 = unset)
  LOADTEST_API_KEY       Bearer key when the profile enables auth
  LOADTEST_SEED          seed of the traffic draw

Statistics: locust's own table shows the HTTP requests; a custom event ``llm_request`` carries
each finished request's timings and is re-emitted as locust request events of type ``TTFT``
(per served model), ``E2EL decision`` and ``E2EL model`` (per x-vsr-selected-decision /
x-vsr-selected-model header), so per-decision and per-model rows appear in locust's CSV.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from pathlib import Path

import gevent
from locust import HttpUser, LoadTestShape, events, task
from locust.event import EventHook
from locust.exception import StopUser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.lib.scenarios import Scenario, Stage  # noqa: E402
from loadtests.lib.targets import TargetRefused, check_local_target  # noqa: E402
from loadtests.lib.timing import RequestRecord, StreamError, StreamTimer, sse_events  # noqa: E402
from loadtests.lib.traffic import SEED_MIX, TrafficSettings, parse_mix, plan_request  # noqa: E402

CHAT_PATH = "/v1/chat/completions"


def _settings_from_env() -> TrafficSettings:
    env = os.environ
    max_tokens = int(env.get("LOADTEST_MAX_TOKENS", "64"))
    return TrafficSettings(
        mix=parse_mix(env["LOADTEST_MIX"]) if env.get("LOADTEST_MIX") else dict(SEED_MIX),
        fusion_share=float(env.get("LOADTEST_FUSION_SHARE", "0")),
        stream_share=float(env.get("LOADTEST_STREAM_SHARE", "0.5")),
        models=tuple(m.strip() for m in env.get("LOADTEST_MODELS", "vllm-sr/auto").split(",") if m.strip()),
        max_tokens=max_tokens or None,
    )


SETTINGS = _settings_from_env()
SCENARIO = (Scenario.from_json(os.environ["LOADTEST_STAGES"]) if os.environ.get("LOADTEST_STAGES")
            else Scenario("constant", (Stage(30, 2, 2),)))
MAX_REQUESTS = int(os.environ.get("LOADTEST_MAX_REQUESTS", "10000"))
RECORDS_PATH = os.environ.get("LOADTEST_RECORDS")
_RNG = random.Random(int(os.environ.get("LOADTEST_SEED", "0")))
_lock = threading.Lock()
_sent = 0


class _RecordSink:
    """Appends one JSON line per finished request (flushed: the runner reads it afterwards)."""

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 — closed at quit

    def __call__(self, record: RequestRecord, **_: object) -> None:
        self._file.write(record.to_json() + "\n")
        self._file.flush()

    def close(self, **_: object) -> None:
        self._file.close()


@events.init.add_listener
def _on_init(environment, **_kwargs):
    if environment.host:
        try:
            check_local_target(environment.host)
        except TargetRefused as exc:
            raise SystemExit(f"refusing to load-test: {exc}") from exc
    environment.events.llm_request = EventHook()
    environment.events.llm_request.add_listener(lambda record, **kw: _to_locust_stats(environment, record))
    if RECORDS_PATH:
        sink = _RecordSink(RECORDS_PATH)
        environment.events.llm_request.add_listener(sink)
        environment.events.quit.add_listener(sink.close)


def _to_locust_stats(environment, record: RequestRecord) -> None:
    """Re-emit a finished request as locust request events (per decision / per model rows)."""
    exc = None if record.ok else RuntimeError(record.error or f"HTTP {record.status}")
    e2el_ms = record.e2el_s * 1000
    fire = environment.events.request.fire
    fire(request_type="E2EL decision", name=record.decision or "(none)", response_time=e2el_ms,
         response_length=record.output_tokens, exception=exc, context={})
    fire(request_type="E2EL model", name=record.model or "(none)", response_time=e2el_ms,
         response_length=record.output_tokens, exception=exc, context={})
    if record.ttft_s is not None:
        fire(request_type="TTFT", name=record.model or "(none)", response_time=record.ttft_s * 1000,
             response_length=0, exception=None, context={})


def _take_request_slot() -> bool:
    global _sent
    with _lock:
        if _sent >= MAX_REQUESTS:
            return False
        _sent += 1
        return True


class ChatUser(HttpUser):
    """One client sending the mix back to back (closed loop: concurrency = users)."""

    wait_time = staticmethod(lambda: 0)

    def on_start(self) -> None:
        try:
            self.host = check_local_target(self.host or "")
        except TargetRefused as exc:
            raise StopUser() from exc
        key = os.environ.get("LOADTEST_API_KEY")
        if key:
            self.client.headers["Authorization"] = f"Bearer {key}"

    @task
    def chat(self) -> None:
        if not _take_request_slot():
            # Quit from a fresh greenlet: quitting kills every user, this one included.
            gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        with _lock:
            planned = plan_request(_RNG, SETTINGS)
        name = f"{CHAT_PATH} [{'stream' if planned.stream else 'json'}]"
        start_wall, start = time.time(), time.perf_counter()
        timer = StreamTimer(start)
        record = RequestRecord(start=start_wall, end=start_wall, category=planned.category,
                               stream=planned.stream, fusion=planned.fusion,
                               requested_model=planned.body["model"], status=0, ok=False)
        with self.client.post(CHAT_PATH, json=planned.body, stream=planned.stream, name=name,
                              catch_response=True) as resp:
            record.status = resp.status_code or 0
            record.decision = resp.headers.get("x-vsr-selected-decision")
            record.model = resp.headers.get("x-vsr-selected-model")
            try:
                if resp.status_code != 200:
                    record.error = (resp.text or str(getattr(resp, "error", "")) or "")[:200]
                elif planned.stream:
                    # chunk_size=None: hand over each chunk as it arrives (the 512-byte default would
                    # batch tokens and hide TTFT and ITL).
                    for chunk in sse_events(resp.iter_lines(chunk_size=None)):
                        timer.on_chunk(chunk, time.perf_counter())
                    record.ok = timer.ttft_s is not None
                    record.error = None if record.ok else "stream ended without a chunk"
                else:
                    usage = resp.json().get("usage") or {}
                    record.output_tokens = int(usage.get("completion_tokens") or 0)
                    record.ok = True
            except (StreamError, ValueError, OSError) as exc:  # OSError: requests' I/O errors
                record.error = f"{type(exc).__name__}: {exc}"[:200]
            if record.ok:
                resp.success()
            else:
                resp.failure(record.error or f"HTTP {record.status}")
        end = time.perf_counter()
        record.end = start_wall + (end - start)
        if planned.stream:
            record.ttft_s = timer.ttft_s
            record.tpot_s = timer.tpot_s(end)
            record.itl_s = timer.itl
            record.output_tokens = timer.output_tokens
        self.environment.events.llm_request.fire(record=record)


class ScenarioShape(LoadTestShape):
    """Follows LOADTEST_STAGES; returning None ends the test (bounded duration)."""

    def tick(self):
        stage = SCENARIO.at(self.get_run_time())
        return None if stage is None else (stage.users, stage.spawn_rate)
