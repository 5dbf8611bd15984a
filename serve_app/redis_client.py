"""Redis plumbing shared by the session store and the shared rate limiter: the fail-fast
client, URL redaction for logs, and outage logging."""

from __future__ import annotations

import logging
import time
from typing import Any, Optional


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


class OutageLog:
    """One warning when a Redis-backed feature starts failing and one info line when it
    recovers; the failures in between are counted by the caller's metric, not logged, so an
    outage cannot flood the logs at request rate. :meth:`snapshot` is what ``/health`` shows."""

    def __init__(self, logger: logging.Logger, url: str, *, what: str, meanwhile: str, metric: str):
        self._log = logger
        self._url = redact_url(url)
        self._what, self._meanwhile, self._metric = what, meanwhile, metric
        self.active = False
        # Wall-clock start of the current outage, its latest error, failures since start-up.
        self.since: Optional[float] = None
        self.last_error: Optional[str] = None
        self.failures = 0

    def failed(self, exc: BaseException, **extra: Any) -> None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self.active:
            return
        self.active = True
        self.since = time.time()
        self._log.warning("%s unreachable (%s: %s); %s until it recovers (further failures are "
                          "counted in %s, not logged)", self._what, type(exc).__name__, exc,
                          self._meanwhile, self._metric, extra={"redis_url": self._url, **extra})

    def succeeded(self) -> None:
        if self.active:
            self.active = False
            self.since = None
            self._log.info("%s reachable again", self._what, extra={"redis_url": self._url})

    def snapshot(self) -> dict[str, Any]:
        """``{"backend": "redis", "reachable": ...}``; while down, since when, the error and
        what the gateway does meanwhile."""
        out: dict[str, Any] = {"backend": "redis", "url": self._url, "reachable": not self.active,
                               "failed_operations": self.failures}
        if self.active:
            out.update(down_for_s=round(time.time() - (self.since or time.time()), 1),
                       error=self.last_error, meanwhile=self._meanwhile, metric=self._metric)
        return out
