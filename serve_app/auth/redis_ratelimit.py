"""Token buckets in Redis: one bucket per API key, shared by every ingress replica.

Same semantics as :class:`~serve_app.auth.ratelimit.RateLimiter` (capacity ``burst or
requests_per_minute``, refill ``requests_per_minute / 60`` per second, one token per request,
``None`` or the seconds until the next token), but the bucket is the Redis hash
``{key_prefix}{key name}`` with the fields ``tokens`` and the refill time ``ts_s`` / ``ts_us``.

One Lua script reads, refills, takes and writes the bucket, so concurrent requests on several
replicas never both spend the last token. The script reads the Redis server's clock (``TIME``),
never a replica's, so replicas whose clocks disagree still agree on how much has refilled. Each
take sets the hash's TTL to the time an empty bucket needs to refill completely (plus a second):
a bucket idle that long is full, which is exactly what a missing bucket means, so expiry loses
nothing and idle keys leave Redis.

Redis is a convenience, not a dependency of answering: when it is unreachable (or any command
fails) the request is limited by this replica's own in-process bucket instead, the failure is
counted in ``horizon_rate_limit_store_errors``, and one warning is logged per outage (an info
line marks recovery). While that lasts each replica limits on its own, so N replicas admit up
to N times a key's rate again. Commands run with a short deadline and no client-side retries
so an outage costs a request milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Optional

from ..redis_client import OutageLog, connect_redis
from ..observability.metrics import record_rate_limit_store_error
from .ratelimit import RateLimiter

log = logging.getLogger(__name__)

# KEYS[1]: the bucket. ARGV: refill rate per second, capacity, TTL in ms.
# Returns false (nil reply: allowed) or the seconds until the next token, as a string: Redis
# truncates Lua numbers to integers in replies.
TAKE_SCRIPT = """
-- Redis 3.2-4.x only allow writes after TIME with effects replication; a no-op from 5 on.
if redis.replicate_commands then redis.replicate_commands() end
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local ttl_ms = tonumber(ARGV[3])
local now = redis.call('TIME')
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts_s', 'ts_us')
local tokens = tonumber(state[1])
local ts_s = tonumber(state[2])
local ts_us = tonumber(state[3])
if tokens == nil or ts_s == nil or ts_us == nil then
  -- New (or expired, i.e. full) bucket.
  tokens = capacity
  ts_s = tonumber(now[1])
  ts_us = tonumber(now[2])
end
-- Seconds and microseconds apart: a float of the whole epoch time would lose microseconds.
local elapsed = (tonumber(now[1]) - ts_s) + (tonumber(now[2]) - ts_us) / 1000000
if elapsed < 0 then elapsed = 0 end  -- a failover to a replica whose clock is behind
-- min(): a limit lowered by a redeploy never leaves more than the new capacity.
tokens = math.min(capacity, tokens + elapsed * rate)
local wait = false
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = string.format('%.17g', (1 - tokens) / rate)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts_s', now[1], 'ts_us', now[2])
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return wait
"""


class RedisRateLimiter:
    """Buckets by API key name in Redis, created on first use with that name's limit."""

    backend = "redis"

    def __init__(self, url: str, *, key_prefix: str, timeout_s: float, client: Any = None,
                 fallback: Optional[RateLimiter] = None):
        self.url = url
        self.key_prefix = key_prefix
        self.timeout_s = timeout_s
        self._client = client if client is not None else connect_redis(url, timeout_s)
        # EVALSHA, loading the script once per server when Redis answers NOSCRIPT (a new or
        # restarted server), so each take sends the digest rather than the script text.
        self._take_script = self._client.register_script(TAKE_SCRIPT)
        # Used for a request only while Redis fails; kept across requests so an outage still
        # limits (per replica) instead of admitting everything.
        self._fallback = fallback if fallback is not None else RateLimiter()
        self._outage = OutageLog(log, url, what="rate limit store", meanwhile="limiting per replica",
                                 metric="horizon_rate_limit_store_errors")

    def key(self, name: str) -> str:
        return f"{self.key_prefix}{name}"

    async def take(self, name: str, requests_per_minute: int, burst: Optional[int] = None) -> Optional[float]:
        """Take one token from ``name``'s shared bucket; None on success, else seconds until
        one is available. Never raises for a Redis problem."""
        rate_per_s = requests_per_minute / 60.0
        capacity = float(burst or requests_per_minute)
        # Time for an empty bucket to refill: an idle bucket expires once it would be full.
        ttl_ms = int(math.ceil(capacity / rate_per_s * 1000)) + 1000
        try:
            # The socket timeouts bound each I/O; this bounds the whole call (connect, pool
            # wait, a NOSCRIPT reload).
            reply = await asyncio.wait_for(
                self._take_script(keys=[self.key(name)], args=[repr(rate_per_s), repr(capacity), ttl_ms]),
                timeout=self.timeout_s * 4)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a storage failure degrades, never fails
            record_rate_limit_store_error(self.backend)
            self._outage.failed(exc)
            return await self._fallback.take(name, requests_per_minute, burst)
        self._outage.succeeded()
        return None if reply is None else float(reply)

    async def health(self) -> dict[str, Any]:
        """Whether Redis answers now (one PING), and the outage so far when it does not."""
        try:
            await asyncio.wait_for(self._client.ping(), timeout=self.timeout_s * 4)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a probe failure is the answer, not an error
            record_rate_limit_store_error(self.backend)
            self._outage.failed(exc)
        else:
            self._outage.succeeded()
        return self._outage.snapshot()

    async def aclose(self) -> None:
        try:
            await self._client.aclose()
        except Exception:  # noqa: BLE001 - closing a dead connection is not an error
            pass


__all__ = ["RedisRateLimiter", "TAKE_SCRIPT"]
