"""Queue-depth autoscaling on the real Ray Serve graph, through two ingress replicas (issue 16).

``qwen-72b`` of the simulated fleet gets 2 decoding slots (≈0.8 s a request) and an admission
capacity equal to those slots, so its engine never has a waiting request: the whole backlog
waits in the ingress replicas' priority lines, as in the issue's measurement. Only the gateway's
demand board can make the model scale. One test, three phases under load:

1. overload (10 clients): the replica count rises to ``max_replicas`` and the admission lines
   grow with it; every answer is a 200;
2. one of the two replicas is killed while requests wait for it: every request still gets
   exactly one well-formed answer, a 200 or a 503 with Retry-After, and Serve replaces it;
3. light load (1 client) while the policy scales back to one replica: requests in flight on the
   replica being removed finish, every answer is a 200.

Runs the session's ``serve_sim`` profile (tests/e2e/conftest.py) with these changes as an
application of its own (``/autoscale``); its sessions and rate limits are in the test Redis, as
two ingress replicas require.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

pytestmark = pytest.mark.e2e

ALIAS = "qwen-72b"
SLOTS = 2
UPSCALE_DELAY_S = 1.0


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=30).json()


def _every_ingress_replica_sees(url: str, replicas: set[str], predicate, timeout_s: float = 60) -> dict:
    """Poll /health until each of ``replicas`` (ingress replicas, by ``x-vsr-replica``) has said
    ``predicate`` of the model; its last answer. An ingress replica learns how many ingress
    replicas run from the demand board's answer to its next report (every 0.5 s): "ready"
    does not mean that it has counted the second replica yet."""
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    model: dict = {}
    while time.monotonic() < deadline:
        r = httpx.get(f"{url}/health", headers={"x-vsr-debug": "true"}, timeout=30)
        model = r.json()["models"][ALIAS]
        if predicate(model):
            seen.add(r.headers.get("x-vsr-replica", ""))
            if replicas <= seen:
                return model
        time.sleep(0.5)
    raise AssertionError(f"after {timeout_s:g} s only {sorted(seen)} of {sorted(replicas)} said so; last: {model}")


def _overrides(args: dict) -> dict:
    models = copy.deepcopy(args["models"])
    for m in models:
        if m["alias"] == ALIAS:
            # ≈0.8 s per request at the fixture's global latency_scale 0.01.
            m["simulated"] = {"ttft_ms": 300, "tpot_ms": 10, "output_tokens": 50, "max_num_seqs": SLOTS,
                              "latency_scale": 100}
            # Queueing is the point: deadlines far above the queue wait (no timeout, no fallback).
            m["timeouts"] = {"first_token_s": 1200, "total_s": 1200}
            m["scaling"] = {"min_replicas": 1, "max_replicas": 2, "max_ongoing_requests": 8,
                            "policy": "queue_depth", "target_queue_per_replica": 1,
                            "upscale_delay_s": UPSCALE_DELAY_S, "downscale_delay_s": 5,
                            "metrics_interval_s": 0.5, "look_back_period_s": 2}
    return {"models": models,
            "global": {"server": {"min_replicas": 2, "max_replicas": 2}},
            # The engine's slots are the whole gateway's capacity: nothing waits in the engine.
            "resilience": {"admission": {ALIAS: {"capacity": SLOTS, "max_queue_size": 200, "max_wait_s": 120,
                                                 "service_time_hint_s": 0.8}}}}


@dataclass
class Answer:
    sent_at: float
    done_at: float
    status: int
    retry_after: str
    body: str


@dataclass
class Load:
    """Closed-loop clients sending ``ALIAS`` chats (no fallback); every answer is kept."""

    url: str
    answers: list[Answer] = field(default_factory=list)
    sent: int = 0
    _stops: list[threading.Event] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_clients(self, n: int) -> threading.Event:
        stop = threading.Event()
        for _ in range(n):
            t = threading.Thread(target=self._client, args=(stop,), daemon=True)
            t.start()
            self._threads.append(t)
        self._stops.append(stop)
        return stop

    def _client(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=180) as http:
            while not stop.is_set():
                with self._lock:
                    self.sent += 1
                sent_at = time.monotonic()
                r = http.post(f"{self.url}/v1/chat/completions", headers={"x-vsr-allow-fallback": "false"},
                              json={"model": ALIAS, "max_tokens": 50,
                                    "messages": [{"role": "user", "content": "hello there, how are you?"}]})
                with self._lock:
                    self.answers.append(Answer(sent_at, time.monotonic(), r.status_code,
                                               r.headers.get("retry-after", ""), r.text))

    def stop_all(self) -> None:
        for stop in self._stops:
            stop.set()
        for t in self._threads:
            t.join(timeout=180)

    def between(self, done_from: float, done_to: float) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if done_from <= a.done_at < done_to]


def _well_formed(status: int, body: str) -> bool:
    import json

    try:
        data = json.loads(body)
    except ValueError:
        return False
    if status == 200:
        return data.get("object") == "chat.completion" and len(data.get("choices", [])) == 1
    return isinstance(data.get("error"), dict) and bool(data["error"].get("message"))


def _wait(url: str, predicate, timeout_s: float, timeline: list) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        model = _health(url)["models"][ALIAS]
        timeline.append((round(time.monotonic(), 1), model.get("replicas"), model["admission"]["capacity"],
                         model["queue_length"]))
        if predicate(model):
            return model
        time.sleep(0.5)
    raise AssertionError(f"not reached in {timeout_s}s; (t, replicas, capacity, waiting): {timeline[-20:]}")


def _replica_actors(app: str) -> set[tuple[str, str]]:
    import ray

    return {(a["name"], a["namespace"]) for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{app}#model-{ALIAS}#")}


@pytest.fixture(scope="module")
def autoscaled(serve_sim):
    with serve_sim.variant("autoscale", _overrides(serve_sim.args)) as profile:
        yield profile


def test_gateway_backlog_scales_a_model_up_and_back_with_no_lost_request(autoscaled):
    import ray

    load = Load(autoscaled.url)
    timeline: list = []
    try:
        start = _every_ingress_replica_sees(autoscaled.url, autoscaled.ready_replicas,
                                            lambda m: m["admission"]["ingress_replicas"] == 2)
        assert start["replicas"] == 1 and start["admission"]["ingress_replicas"] == 2
        assert start["admission"]["capacity"] == 1          # 2 slots shared by 2 ingress replicas

        # 1. Overload: 10 clients against 2 slots; the backlog waits in the ingress lines only.
        began = time.monotonic()
        heavy = load.add_clients(10)
        scaled = _wait(autoscaled.url, lambda m: m.get("replicas", 0) >= 2, 90, timeline)
        reaction_s = time.monotonic() - began
        # The lines follow the new replica: each ingress replica now sends 2 at once.
        _wait(autoscaled.url, lambda m: m["admission"]["capacity"] == 2 and m["admission"]["model_replicas"] == 2,
              30, timeline)
        print(f"\nqwen-72b reached {scaled['replicas']} replicas {reaction_s:.1f} s after the overload began "
              f"(upscale delay {UPSCALE_DELAY_S:g} s + replica start)")
        overload = load.between(0, time.monotonic())
        assert overload and all(a.status == 200 for a in overload), \
            [(a.status, a.body[:120]) for a in overload if a.status != 200][:5]

        # 2. Kill one of the two replicas while requests wait for it.
        victims = _replica_actors(autoscaled.name)
        assert len(victims) == 2, victims
        name, namespace = sorted(victims)[0]
        killed_at = time.monotonic()
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
        time.sleep(5)

        # 3. Light load while the policy scales back down: in-flight requests on the removed
        # replica finish.
        light = load.add_clients(1)
        heavy.set()
        _wait(autoscaled.url, lambda m: m.get("replicas") == 1 and m["admission"]["capacity"] == 1, 120, timeline)
        time.sleep(2)
        light.set()
        load.stop_all()

        # Nothing lost: every request sent got exactly one well-formed answer.
        assert load.sent == len(load.answers)
        assert all(_well_formed(a.status, a.body) for a in load.answers)
        # Requests in flight on the killed replica, or sent just after, may get a 503 with
        # Retry-After (no fallback was allowed); everything else is a 200.
        window = [a for a in load.answers if a.done_at >= killed_at and a.sent_at <= killed_at + 10]
        rest = [a for a in load.answers if a not in window]
        bad = [(a.status, a.retry_after, a.body[:150]) for a in window
               if not (a.status == 200 or (a.status == 503 and float(a.retry_after or 0) > 0))]
        assert not bad, bad
        assert [a.status for a in rest if a.status != 200] == [], \
            [(a.status, a.body[:150]) for a in rest if a.status != 200][:5]
        assert any(a.status == 200 for a in window)
        assert not _replica_actors(autoscaled.name) & {(name, namespace)}
        print(f"answers: {len(load.answers)} ({sum(a.status == 503 for a in window)} x 503 around the kill); "
              f"timeline (t, replicas, ingress capacity, waiting): {timeline[::4]}")
    finally:
        load.stop_all()
