"""The Redis session store against a REAL redis-server (started through scripts/redis.sh).

``redis_url`` (tests/conftest.py) is the shared test server. The outage test owns a second
server on HORIZON_TEST_REDIS_OUTAGE_PORT (default 6398) so stopping it disturbs no other test.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid

import pytest

redis = pytest.importorskip("redis")

from serve_app.sessions import RedisSessionStore, answer_message, prepare_turn, record_turn  # noqa: E402

OUTAGE_PORT = int(os.environ.get("HORIZON_TEST_REDIS_OUTAGE_PORT", "6398"))
STORE_LOGGER = "serve_app.sessions.redis_store"


@pytest.fixture
def prefix(redis_prefix):
    return redis_prefix


def make_store(url: str, prefix: str, **overrides) -> RedisSessionStore:
    params = dict(key_prefix=prefix, ttl_s=3600.0, max_messages=1000, timeout_s=1.0)
    params.update(overrides)
    return RedisSessionStore(url, **params)


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


class EchoModel:
    """A ModelClient fake: answers every request and remembers what it was sent."""

    alias = "qwen-72b"

    def __init__(self):
        self.requests: list[dict] = []

    async def complete(self, request: dict) -> dict:
        self.requests.append(request)
        last = request["messages"][-1]["content"]
        return {"object": "chat.completion", "model": self.alias,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"answer to {last}"}}]}


async def serve_turn(store, model: EchoModel, session: str, task: str, text: str) -> dict:
    """What the ingress does around the algorithm: read, forward, answer, write."""
    turn = await prepare_turn(store, session, task, [u(text)], prompt_budget=8000)
    response = await model.complete({"messages": turn.messages})
    await record_turn(store, turn, answer_message(response))
    return response


# --------------------------------------------------------------------------- behaviour


@pytest.mark.asyncio
async def test_task_types_are_isolated_in_separate_keys(redis_url, prefix):
    store = make_store(redis_url, prefix)
    try:
        await store.append("s1", "code", [u("fix this"), a("done")])
        await store.append("s1", "chat", [u("hello"), a("hi")])
        assert await store.history("s1", "code") == [u("fix this"), a("done")]
        assert await store.history("s1", "chat") == [u("hello"), a("hi")]
        assert await store.history("s1", "reasoning") == []
        raw = redis.Redis.from_url(redis_url, decode_responses=True)
        assert sorted(raw.scan_iter(match=f"{prefix}*")) == [f"{prefix}s1:chat", f"{prefix}s1:code"]
        raw.close()
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_ttl_is_set_refreshed_on_write_and_expires(redis_url, prefix):
    store = make_store(redis_url, prefix, ttl_s=0.6)
    raw = redis.Redis.from_url(redis_url)
    try:
        await store.append("s", "chat", [u("1")])
        key = f"{prefix}s:chat"
        first = raw.pttl(key)
        assert 0 < first <= 600
        await asyncio.sleep(0.35)
        await store.append("s", "chat", [u("2")])
        assert raw.pttl(key) > first - 150  # refreshed, not still counting down from the first write
        await asyncio.sleep(0.35)
        assert await store.history("s", "chat") == [u("1"), u("2")]  # alive thanks to the refresh
        await asyncio.sleep(0.5)
        assert await store.history("s", "chat") == []
        assert raw.exists(key) == 0
    finally:
        raw.close()
        await store.aclose()


@pytest.mark.asyncio
async def test_50_concurrent_appends_from_several_replicas_lose_nothing(redis_url, prefix):
    # Five store instances stand for five ingress replicas writing one session at once.
    stores = [make_store(redis_url, prefix) for _ in range(5)]
    try:
        await asyncio.gather(*(stores[i % 5].append("s", "chat", [u(f"q{i}"), a(f"a{i}")])
                               for i in range(50)))
        history = await stores[0].history("s", "chat")
        assert len(history) == 100
        assert {m["content"] for m in history} == {f"{k}{i}" for i in range(50) for k in "qa"}
        for i in range(0, 100, 2):  # every turn stays whole
            assert history[i]["content"][1:] == history[i + 1]["content"][1:]
    finally:
        for s in stores:
            await s.aclose()


@pytest.mark.asyncio
async def test_bucket_is_bounded_to_max_messages(redis_url, prefix):
    store = make_store(redis_url, prefix, max_messages=4)
    try:
        for i in range(3):
            await store.append("s", "chat", [u(f"q{i}"), a(f"a{i}")])
        assert await store.history("s", "chat") == [u("q1"), a("a1"), u("q2"), a("a2")]
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_unicode_and_tool_calls_round_trip(redis_url, prefix):
    store = make_store(redis_url, prefix)
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                  "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}
    try:
        await store.append("s", "code", [u("写一个排序"), call])
        assert await store.history("s", "code") == [u("写一个排序"), call]
    finally:
        await store.aclose()


# --------------------------------------------------------------------------- outage


@pytest.mark.asyncio
async def test_outage_mid_run_serves_without_history_warns_once_and_counts(metrics, caplog,
                                                                          redis_servers):
    redis_script = redis_servers.script
    started = redis_servers.start_or_skip(OUTAGE_PORT)
    url = f"redis://127.0.0.1:{OUTAGE_PORT}/0"
    store = make_store(url, f"horizon-outage:{uuid.uuid4().hex[:8]}:")
    model = EchoModel()
    store_logger = logging.getLogger(STORE_LOGGER)
    store_logger.addHandler(caplog.handler)  # robust even if a handler config stops propagation
    caplog.set_level(logging.INFO, logger=STORE_LOGGER)
    try:
        await serve_turn(store, model, "sess", "chat", "first")
        await serve_turn(store, model, "sess", "chat", "second")
        assert model.requests[-1]["messages"] == [u("first"), a("answer to first"), u("second")]

        assert redis_script("stop", OUTAGE_PORT).returncode == 0
        for i in range(4):
            began = time.monotonic()
            response = await serve_turn(store, model, "sess", "chat", f"during outage {i}")
            assert time.monotonic() - began < 2.0  # an outage costs little latency
            assert response["choices"][0]["message"]["content"] == f"answer to during outage {i}"
            assert model.requests[-1]["messages"] == [u(f"during outage {i}")]  # no history

        # Deduplicated: the record reaches caplog's handler on this logger and, when logs
        # propagate, again on the root logger.
        warnings = list({id(r): r for r in caplog.records
                         if r.name == STORE_LOGGER and r.levelno == logging.WARNING}.values())
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "unreachable" in warnings[0].getMessage()
        assert metrics.value("horizon_session_store_errors", backend="redis", operation="history") == 4
        assert metrics.value("horizon_session_store_errors", backend="redis", operation="append") == 4

        # Recovery: the server comes back (empty, no persistence) and history works again.
        assert redis_script("start", OUTAGE_PORT).returncode == 0
        await serve_turn(store, model, "sess", "chat", "after")
        await serve_turn(store, model, "sess", "chat", "again")
        assert model.requests[-1]["messages"] == [u("after"), a("answer to after"), u("again")]
        assert any("reachable again" in r.getMessage() for r in caplog.records if r.name == STORE_LOGGER)
    finally:
        store_logger.removeHandler(caplog.handler)
        await store.aclose()
        if started or redis_script("status", OUTAGE_PORT).returncode == 0:
            redis_script("stop", OUTAGE_PORT)


@pytest.mark.asyncio
async def test_never_reachable_redis_degrades_from_the_first_call(metrics):
    # Port 1 on localhost: connection refused immediately.
    store = make_store("redis://127.0.0.1:1/0", "x:")
    try:
        assert await store.history("s", "chat") == []
        await store.append("s", "chat", [u("x")])  # no exception
        assert await store.ping() is False
        assert metrics.total("horizon_session_store_errors") == 3
    finally:
        await store.aclose()
