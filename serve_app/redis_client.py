"""The one way this project connects to Redis (session store, shared rate limits)."""

from __future__ import annotations

from typing import Any


def connect_redis(url: str, timeout_s: float) -> Any:
    """An asyncio Redis client that fails fast.

    No retries: redis-py's default (3 retries with backoff) would turn an outage into seconds of
    added latency per request, while every caller here has a degraded path instead (serve
    without history, limit with the replica's own bucket). Imported lazily so that in-process
    defaults work where the redis package is absent.
    """
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout_s,
                                   socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))


def redact_url(url: str) -> str:
    """The URL without a password, for log lines."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
