"""The shared (Redis) rate limiter against a REAL redis-server (``redis_url``, tests/conftest.py).

Two limiter instances stand for two ingress replicas. Rates are chosen so that no token refills
during a test unless the test waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid

import pytest

redis = pytest.importorskip("redis")

from serve_app.auth import ApiKeyAuthenticator, hash_key  # noqa: E402
from serve_app.auth.keys import build_rate_limiter  # noqa: E402
from serve_app.auth.ratelimit import RateLimiter  # noqa: E402
from serve_app.auth.redis_ratelimit import RedisRateLimiter  # noqa: E402
from serve_app.config.access import AuthSettings  # noqa: E402
from serve_app.errors import RateLimited  # noqa: E402

LIMITER_LOGGER = "serve_app.auth.redis_ratelimit"
OUTAGE_PORT = int(os.environ.get("HORIZON_TEST_REDIS_RATELIMIT_OUTAGE_PORT", "6397"))
PLAIN_ALICE = "sk-alice-0123456789"


@pytest.fixture
def prefix(redis_prefix):
    return redis_prefix


@pytest.fixture
def limiter_logs(caplog):
    """Records of the limiter's logger, once each (they reach caplog here and, when logs
    propagate, again through the root logger)."""
    logger = logging.getLogger(LIMITER_LOGGER)
    logger.addHandler(caplog.handler)  # robust even if a handler config stops propagation
    caplog.set_level(logging.INFO, logger=LIMITER_LOGGER)

    def records(level: int) -> list[logging.LogRecord]:
        return list({id(r): r for r in caplog.records
                     if r.name == LIMITER_LOGGER and r.levelno == level}.values())

    yield records
    logger.removeHandler(caplog.handler)


def make_limiter(url: str, prefix: str, **overrides) -> RedisRateLimiter:
    params = dict(key_prefix=prefix, timeout_s=0.5)
    params.update(overrides)
    return RedisRateLimiter(url, **params)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alice_settings(**overrides) -> AuthSettings:
    return AuthSettings.model_validate({
        "enabled": True, "rate_limit_store": "redis", **overrides,
        "keys": [{"name": "alice", "sha256": hash_key(PLAIN_ALICE),
                  "requests_per_minute": 6, "burst": 4}]})


# --------------------------------------------------------------------------- shared bucket


@pytest.mark.asyncio
async def test_two_replicas_sharing_a_key_admit_exactly_burst_together(redis_url, prefix):
    replicas = [make_limiter(redis_url, prefix), make_limiter(redis_url, prefix)]
    try:
        # 6/min: no token refills during the test. 20 concurrent requests, alternating replicas.
        results = await asyncio.gather(*(replicas[i % 2].take("alice", 6, 5) for i in range(20)))
        assert sum(r is None for r in results) == 5  # not 2 x 5
        assert all(w is None or 9.0 < w <= 10.0 for w in results)
        # Sequentially, too: replica 1 sees the bucket replica 0 emptied.
        assert await replicas[0].take("bob", 6, 2) is None
        assert await replicas[1].take("bob", 6, 2) is None
        assert await replicas[0].take("bob", 6, 2) is not None
        assert await replicas[1].take("bob", 6, 2) is not None
    finally:
        for r in replicas:
            await r.aclose()


@pytest.mark.asyncio
async def test_authenticators_built_from_config_share_the_limit(redis_url, prefix, metrics):
    settings = alice_settings(redis_url=redis_url, redis_key_prefix=prefix)
    replicas = [ApiKeyAuthenticator(settings), ApiKeyAuthenticator(settings)]
    try:
        assert all(isinstance(a._limiter, RedisRateLimiter) for a in replicas)
        alice = replicas[0].authenticate(f"Bearer {PLAIN_ALICE}")
        admitted, refused = 0, []
        for i in range(10):
            try:
                await replicas[i % 2].check_rate(alice)
                admitted += 1
            except RateLimited as exc:
                refused.append(exc)
        assert admitted == 4
        assert len(refused) == 6
        # 6/min = one token per 10 s; the bucket just ran dry.
        assert all(9.0 < exc.retry_after <= 10.0 for exc in refused)
        assert refused[0].headers() == {"Retry-After": "10"}
        assert metrics.value("horizon_auth_rejections", reason="rate_limited") == 6
        assert metrics.total("horizon_rate_limit_store_errors") == 0
    finally:
        for a in replicas:
            await a.aclose()


@pytest.mark.asyncio
async def test_bucket_refills_at_the_configured_rate(redis_url, prefix):
    limiter = make_limiter(redis_url, prefix)
    try:
        # 600/min = 10 tokens/s, capacity 2.
        assert await limiter.take("alice", 600, 2) is None
        assert await limiter.take("alice", 600, 2) is None
        wait = await limiter.take("alice", 600, 2)
        assert wait is not None and 0 < wait <= 0.1
        await asyncio.sleep(0.25)  # 2.5 tokens' worth, capped at the capacity of 2
        assert await limiter.take("alice", 600, 2) is None
        assert await limiter.take("alice", 600, 2) is None
        assert await limiter.take("alice", 600, 2) is not None
    finally:
        await limiter.aclose()


@pytest.mark.asyncio
async def test_retry_after_is_the_time_until_the_next_token(redis_url, prefix):
    limiter = make_limiter(redis_url, prefix)
    try:
        assert await limiter.take("alice", 60, 1) is None
        first = await limiter.take("alice", 60, 1)
        assert 0.9 < first <= 1.0
        await asyncio.sleep(0.3)
        second = await limiter.take("alice", 60, 1)
        # Refusals take nothing: the wait shrinks with the time passed.
        assert first - 0.45 < second < first - 0.25
        # burst omitted: a minute's worth; the next token then comes after 60/rpm seconds.
        for _ in range(3):
            assert await limiter.take("bob", 3) is None
        assert 19.0 < await limiter.take("bob", 3) <= 20.0
    finally:
        await limiter.aclose()


@pytest.mark.asyncio
async def test_different_keys_have_independent_buckets(redis_url, prefix):
    limiter = make_limiter(redis_url, prefix)
    try:
        assert await limiter.take("alice", 6, 1) is None
        assert await limiter.take("alice", 6, 1) is not None
        assert await limiter.take("bob", 6, 1) is None
        assert await limiter.take("bob", 6, 1) is not None
        raw = redis.Redis.from_url(redis_url, decode_responses=True)
        assert sorted(raw.scan_iter(match=f"{prefix}*")) == [f"{prefix}alice", f"{prefix}bob"]
        raw.close()
    finally:
        await limiter.aclose()


@pytest.mark.asyncio
async def test_bucket_expires_when_it_would_be_full_again(redis_url, prefix):
    limiter = make_limiter(redis_url, prefix)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        # 600/min, capacity 3: empty to full in 0.3 s; TTL = that + 1 s.
        assert await limiter.take("alice", 600, 3) is None
        ttl = raw.pttl(f"{prefix}alice")
        assert 1000 < ttl <= 1300
        fields = raw.hgetall(f"{prefix}alice")
        assert set(fields) == {"tokens", "ts_s", "ts_us"}
        assert float(fields["tokens"]) == pytest.approx(2.0)
        # Redis's clock, not this process's (same host here, so they agree within a second).
        assert abs(int(fields["ts_s"]) - time.time()) < 2
    finally:
        raw.close()
        await limiter.aclose()


@pytest.mark.asyncio
async def test_a_refill_time_in_the_future_grants_nothing_extra(redis_url, prefix):
    """A failover to a Redis whose clock is behind the stored refill time: no negative refill,
    no error, the bucket just waits."""
    limiter = make_limiter(redis_url, prefix)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        server_s = int(raw.time()[0])
        raw.hset(f"{prefix}alice", mapping={"tokens": "0", "ts_s": server_s + 100, "ts_us": 0})
        wait = await limiter.take("alice", 60, 5)
        assert wait == pytest.approx(1.0)
    finally:
        raw.close()
        await limiter.aclose()


@pytest.mark.asyncio
async def test_the_script_is_reloaded_after_a_script_flush(redis_url, prefix):
    """EVALSHA on a server that lost its scripts (restart, failover) loads the script again."""
    limiter = make_limiter(redis_url, prefix)
    raw = redis.Redis.from_url(redis_url)
    try:
        assert await limiter.take("alice", 6, 2) is None
        raw.script_flush()
        assert await limiter.take("alice", 6, 2) is None
        assert await limiter.take("alice", 6, 2) is not None
    finally:
        raw.close()
        await limiter.aclose()


# --------------------------------------------------------------------------- outage


@pytest.mark.asyncio
async def test_unreachable_redis_falls_back_to_local_limiting_and_warns_once(metrics, limiter_logs):
    limiter = make_limiter(f"redis://127.0.0.1:{unused_port()}/0", "x:")
    try:
        began = time.monotonic()
        results = [await limiter.take("alice", 60, 3) for _ in range(6)]
        assert time.monotonic() - began < 1.5  # refused connections cost milliseconds
        # Still limited, by this replica's own bucket.
        assert results[:3] == [None, None, None]
        assert all(0.9 < w <= 1.0 for w in results[3:])
        assert await limiter.take("bob", 60, 3) is None  # per key, as always
        warnings = limiter_logs(logging.WARNING)
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "unreachable" in warnings[0].getMessage()
        assert metrics.value("horizon_rate_limit_store_errors", backend="redis") == 7
    finally:
        await limiter.aclose()


@pytest.mark.asyncio
async def test_outage_mid_run_falls_back_then_recovers(metrics, limiter_logs, redis_servers):
    started = redis_servers.start_or_skip(OUTAGE_PORT)
    limiter = make_limiter(redis_servers.url(OUTAGE_PORT), f"horizon-outage-rl:{uuid.uuid4().hex[:8]}:")
    try:
        assert await limiter.take("alice", 6, 2) is None
        assert await limiter.take("alice", 6, 2) is None
        assert await limiter.take("alice", 6, 2) is not None  # shared bucket empty

        assert redis_servers.script("stop", OUTAGE_PORT).returncode == 0
        # The local bucket is separate (and starts full): an outage limits per replica.
        during = [await limiter.take("alice", 6, 2) for _ in range(3)]
        assert during[:2] == [None, None] and during[2] is not None
        assert len(limiter_logs(logging.WARNING)) == 1
        assert metrics.value("horizon_rate_limit_store_errors", backend="redis") == 3

        # The server comes back (empty, no persistence): a fresh shared bucket.
        assert redis_servers.script("start", OUTAGE_PORT).returncode == 0
        assert await limiter.take("alice", 6, 2) is None
        assert any("reachable again" in r.getMessage() for r in limiter_logs(logging.INFO))
        assert metrics.value("horizon_rate_limit_store_errors", backend="redis") == 3
    finally:
        await limiter.aclose()
        if started or redis_servers.script("status", OUTAGE_PORT).returncode == 0:
            redis_servers.script("stop", OUTAGE_PORT)


# --------------------------------------------------------------------------- wiring


def test_store_choice_comes_from_config(redis_url):
    assert isinstance(build_rate_limiter(AuthSettings()), RateLimiter)
    shared = build_rate_limiter(AuthSettings(rate_limit_store="redis", redis_url=redis_url,
                                             redis_key_prefix="p:", redis_timeout_s=0.2))
    assert isinstance(shared, RedisRateLimiter)
    assert (shared.url, shared.key_prefix, shared.timeout_s) == (redis_url, "p:", 0.2)
    # Unset on a bare AuthSettings: the sessions default (a profile fills in sessions.redis_url).
    assert build_rate_limiter(AuthSettings(rate_limit_store="redis")).url == "redis://127.0.0.1:6379/0"
