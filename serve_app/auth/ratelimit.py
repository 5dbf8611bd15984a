"""Token-bucket request rate limits, one bucket per API key.

A bucket holds up to ``burst`` tokens and refills at ``requests_per_minute / 60`` per second;
each request takes one. An empty bucket means 429 with the seconds until the next token as
``Retry-After``.

:class:`RateLimiter` keeps the buckets in the ingress replica (``auth.rate_limit_store:
inprocess``, the default): with N ingress replicas a key can reach up to N times its limit, as
Ray Serve spreads a client's requests. :class:`~serve_app.auth.redis_ratelimit.RedisRateLimiter`
(``rate_limit_store: redis``) keeps one bucket per key in Redis, shared by every replica, and
falls back to a :class:`RateLimiter` while Redis is unreachable. Both satisfy
:class:`RateLimitStore`; see docs/sessions.md.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, runtime_checkable


@dataclass
class TokenBucket:
    rate_per_s: float
    capacity: float
    tokens: float = field(default=-1.0)
    updated_at: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.capacity

    def take(self, now: float) -> Optional[float]:
        """Take one token; None on success, else seconds until one is available."""
        self.tokens = min(self.capacity, self.tokens + (now - self.updated_at) * self.rate_per_s)
        self.updated_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate_per_s


@runtime_checkable
class RateLimitStore(Protocol):
    async def take(self, name: str, requests_per_minute: int, burst: Optional[int] = None) -> Optional[float]:
        """Take one token from ``name``'s bucket; None on success, else seconds until one is
        available. Async because the shared store does I/O; never raises for a storage problem."""

    async def health(self) -> dict:
        """What ``/health`` shows of the store: ``{"backend": ..., "reachable": ...}``."""

    async def aclose(self) -> None:
        """Release connections (nothing for the in-process store)."""


class RateLimiter:
    """Buckets by name in this process, created on first use with that name's limit."""

    backend = "inprocess"

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    async def take(self, name: str, requests_per_minute: int, burst: Optional[int] = None) -> Optional[float]:
        # Nothing awaited: the lock is held for a few arithmetic operations (Ray Serve may call
        # a replica from more than one thread).
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(name)
            if bucket is None:
                bucket = TokenBucket(rate_per_s=requests_per_minute / 60.0,
                                     capacity=float(burst or requests_per_minute), updated_at=now)
                self._buckets[name] = bucket
            return bucket.take(now)

    async def health(self) -> dict:
        return {"backend": self.backend, "reachable": True}

    async def aclose(self) -> None:
        return None
