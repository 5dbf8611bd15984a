"""The response stores: in process (TTL, refresh, byte bound, copies) and in a real Redis (TTL,
refresh, one-round-trip reads, delete)."""

from __future__ import annotations

import asyncio
import json

import pytest

from serve_app.config.access import SessionSettings
from serve_app.sessions.stored_responses import (InProcessResponseStore, RedisResponseStore,
                                                 ResponseStoreUnavailable, build_response_store)


def run(coro):
    return asyncio.run(coro)


def record(text: str) -> dict:
    return {"owner": None, "response": {"id": text}, "conversation": [{"role": "user", "content": text}]}


def test_in_process_records_expire_are_bounded_and_are_copies():
    now = [0.0]
    size = len(json.dumps(record("a"), separators=(",", ":")))
    store = InProcessResponseStore(ttl_s=10, max_bytes=2 * size, clock=lambda: now[0])
    kept = record("a")
    run(store.put("a", kept))
    kept["conversation"].append({"role": "user", "content": "edited after storing"})
    got = run(store.get("a"))
    assert got == record("a")
    got["response"]["id"] = "changed by a reader"
    assert run(store.get("a")) == record("a")
    run(store.put("b", record("b")))
    run(store.put("c", record("c")))            # over the bound: the oldest goes
    assert run(store.get("a")) is None and run(store.get("b")) == record("b")
    assert store.size_bytes == 2 * size
    now[0] = 10.0                                # the TTL has passed
    assert run(store.get("b")) is None and run(store.delete("c")) is False and store.size_bytes == 0


def test_in_process_refresh_restarts_the_ttl_and_keeps_a_conversation_in_use_from_eviction():
    now = [0.0]
    size = len(json.dumps(record("a"), separators=(",", ":")))
    store = InProcessResponseStore(ttl_s=10, max_bytes=2 * size, clock=lambda: now[0])
    run(store.put("a", record("a")))
    run(store.put("b", record("b")))
    now[0] = 8.0
    run(store.refresh(["a", "gone"]))            # an unknown id is ignored
    run(store.put("c", record("c")))             # over the bound: "b" is now the oldest
    now[0] = 15.0                                # "a" was refreshed at 8: it lives to 18
    assert run(store.get_many(["a", "b", "c"])) == [record("a"), None, record("c")]
    now[0] = 18.0
    assert run(store.get_many(["a", "c"])) == [None, None]


def test_a_record_larger_than_the_in_process_bound_is_refused():
    store = InProcessResponseStore(ttl_s=10, max_bytes=1024)
    run(store.put("small", record("s")))
    with pytest.raises(ResponseStoreUnavailable, match="inprocess_max_response_bytes"):
        run(store.put("big", record("x" * 2000)))
    assert run(store.get("small")) == record("s") and run(store.get("big")) is None


def test_redis_records_carry_the_ttl_and_delete(redis_url, redis_prefix):
    import redis

    raw = redis.Redis.from_url(redis_url)
    raw.set(f"{redis_prefix}resp_bad", "not json")

    async def scenario():
        store = RedisResponseStore(redis_url, key_prefix=redis_prefix, ttl_s=60, timeout_s=1.0)
        await store.put("resp_1", record("x"))
        raw.pexpire(f"{redis_prefix}resp_1", 5_000)
        await store.refresh(["resp_1", "resp_gone"])
        ttl_ms = raw.pttl(f"{redis_prefix}resp_1")
        got, corrupt = await store.get("resp_1"), await store.get("resp_bad")
        many = await store.get_many(["resp_gone", "resp_1", "resp_bad"])
        deleted, again, missing = await store.delete("resp_1"), await store.delete("resp_1"), await store.get("resp_1")
        await store.aclose()
        return ttl_ms, got, corrupt, many, (deleted, again, missing)

    ttl_ms, got, corrupt, many, deletes = run(scenario())
    raw.close()
    assert 5_000 < ttl_ms <= 60_000 and got == record("x") and corrupt is None   # refreshed to the TTL
    assert many == [None, record("x"), None]
    assert deletes == (True, False, None)


@pytest.mark.parametrize("settings, expected", [
    ({}, InProcessResponseStore),
    ({"backend": "redis"}, RedisResponseStore),
    ({"store_responses": False}, type(None)),
    ({"enabled": False}, type(None)),
])
def test_the_profile_chooses_the_store(settings, expected):
    assert isinstance(build_response_store(SessionSettings(**settings)), expected)
