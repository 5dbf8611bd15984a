"""Where session history lives: one bucket per (session, task type).

Two stores satisfy :class:`SessionStore`: :class:`InProcessSessionStore` (the embedded default;
history lives in one ingress replica and is lost on restart) and
:class:`~serve_app.sessions.redis_store.RedisSessionStore` (shared by every ingress replica).
Neither ever raises for a storage problem: a request without history is still a good request.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from typing import Callable, Protocol, runtime_checkable

from ..config.access import SessionSettings
from .buckets import check_bucket
from .redis_store import RedisSessionStore

Message = dict


@runtime_checkable
class SessionStore(Protocol):
    async def history(self, session_id: str, task_type: str) -> list[dict]:
        """The bucket's messages, oldest first ([] when empty, expired or unreachable)."""

    async def append(self, session_id: str, task_type: str, messages: list[dict]) -> None:
        """Append one turn atomically and refresh the bucket's TTL."""

    async def health(self) -> dict:
        """What ``/health`` shows of the store: ``{"backend": ..., "reachable": ...}``."""


class InProcessSessionStore:
    """History in this process's memory, with the same TTL and size bounds as Redis."""

    backend = "inprocess"

    def __init__(self, *, ttl_s: float, max_messages: int, max_buckets: int,
                 clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.max_messages = max_messages
        self.max_buckets = max_buckets
        self._clock = clock
        # (session, task) -> (expires_at, messages); ordered by last write for LRU eviction.
        self._buckets: OrderedDict[tuple[str, str], tuple[float, list[Message]]] = OrderedDict()
        # Ray Serve may call a replica from more than one thread; appends must not interleave.
        self._lock = threading.Lock()

    async def history(self, session_id: str, task_type: str) -> list[dict]:
        check_bucket(session_id, task_type)
        key = (session_id, task_type)
        with self._lock:
            entry = self._buckets.get(key)
            if entry is None:
                return []
            expires_at, messages = entry
            if self._clock() >= expires_at:
                del self._buckets[key]
                return []
            # Copies: a caller editing the forwarded messages must not rewrite history.
            return copy.deepcopy(messages)

    async def append(self, session_id: str, task_type: str, messages: list[dict]) -> None:
        check_bucket(session_id, task_type)
        if not messages:
            return
        key = (session_id, task_type)
        now = self._clock()
        with self._lock:
            entry = self._buckets.pop(key, None)
            stored = entry[1] if entry is not None and now < entry[0] else []
            stored = (stored + copy.deepcopy(messages))[-self.max_messages:]
            self._buckets[key] = (now + self.ttl_s, stored)
            while len(self._buckets) > self.max_buckets:
                self._buckets.popitem(last=False)

    async def health(self) -> dict:
        return {"backend": self.backend, "reachable": True}

    async def aclose(self) -> None:
        return None


def build_session_store(settings: SessionSettings) -> SessionStore:
    if settings.backend == "redis":
        return RedisSessionStore(
            settings.redis_url, key_prefix=settings.key_prefix, ttl_s=settings.ttl_s,
            max_messages=settings.max_messages, timeout_s=settings.redis_timeout_s)
    return InProcessSessionStore(ttl_s=settings.ttl_s, max_messages=settings.max_messages,
                                 max_buckets=settings.inprocess_max_buckets)


__all__ = ["SessionStore", "InProcessSessionStore", "RedisSessionStore", "build_session_store"]
