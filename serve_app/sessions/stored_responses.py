"""Stored responses of the Responses API: what ``previous_response_id`` continues and
``GET /v1/responses/{id}`` returns.

A record is one JSON object: the request's ``input_items`` and the ``response`` object as the
client received it (together, the turn it added to its conversation: the request's
``instructions`` are not part of it, OpenAI does not carry them over to a continuation), the
ids of the responses before it in its conversation (``ancestors``, oldest first), and the
``owner`` (the API key's name, None without keys). The store keeps them as they are; the API
layer (serve_app.api.response_archive) reads a turn back as chat messages.
The Conversations API's conversations are records of the same kind of store under their own
keys (serve_app.api.conversations), changed in place with ``update``.
A response belongs to its owner: another key asking for it gets the same 404 as for an id that
never existed.

Each record holds its own turn, not the whole conversation: an agent's chain of N responses
costs the conversation's size once, not N times over (a coding agent's tool outputs would
otherwise be copied into every later record). A continuation reads the response, then the
rest of its chain in one round trip (``get_many``), and refreshes their TTL (``refresh``), so a
conversation lives ``responses_ttl_s`` after its last turn.

Two stores, chosen by ``sessions.backend`` like history: in the ingress replica's memory
(bounded, least recently used conversation evicted first) or one Redis string per response with a TTL, shared by every
ingress replica. Unlike history, a store that cannot be read is an error the client sees (503):
continuing a conversation without the earlier turns would answer a different question.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional, Protocol, runtime_checkable

from ..config.access import SessionSettings
from ..errors import HorizonError
from ..observability.metrics import record_session_store_error
from ..redis_client import OutageLog, connect_redis

log = logging.getLogger(__name__)

Record = dict[str, Any]


class ResponseStoreUnavailable(HorizonError):
    """The store could not be read or written now (Redis down)."""

    status = 503
    type = "service_unavailable"
    code = "response_store_unavailable"


@runtime_checkable
class ResponseStore(Protocol):
    backend: str

    async def get(self, response_id: str) -> Optional[Record]:
        """The record, None when it was never stored, expired or was deleted. Raises
        :class:`ResponseStoreUnavailable` when the store cannot answer."""

    async def get_many(self, response_ids: list[str]) -> list[Optional[Record]]:
        """Each id's record or None, in order, in one round trip."""

    async def put(self, response_id: str, record: Record) -> None:
        """Store the record for the configured TTL. Raises :class:`ResponseStoreUnavailable`."""

    async def refresh(self, response_ids: list[str]) -> None:
        """Restart the TTL of these records (a conversation still in use)."""

    async def delete(self, response_id: str) -> bool:
        """Whether a record was there. Raises :class:`ResponseStoreUnavailable`."""

    async def update(self, record_id: str, change: Callable[[Optional[Record]], Optional[Record]]) -> Optional[Record]:
        """Replace a record with ``change(record)`` atomically (``record`` None when absent;
        ``change`` returning None leaves the store as it was), restarting its TTL; returns what
        ``change`` returned. Two replicas appending to one conversation both land. ``change`` may
        run more than once (Redis retries it when the record changed under it)."""


class InProcessResponseStore:
    """Records in this process's memory, with a TTL and a bound on their total size (the
    oldest are evicted first; a record larger than the bound is refused)."""

    backend = "inprocess"

    def __init__(self, *, ttl_s: float, max_bytes: int, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._clock = clock
        # id -> (expires_at, record as JSON): a copy nobody can edit after it is stored.
        self._records: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()   # Serve may call a replica from more than one thread

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def get(self, response_id: str) -> Optional[Record]:
        return (await self.get_many([response_id]))[0]

    async def get_many(self, response_ids: list[str]) -> list[Optional[Record]]:
        with self._lock:
            return [self._live(response_id) for response_id in response_ids]

    def _live(self, response_id: str) -> Optional[Record]:
        entry = self._records.get(response_id)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            self._drop(response_id)
            return None
        return json.loads(entry[1])

    async def refresh(self, response_ids: list[str]) -> None:
        expires_at = self._clock() + self.ttl_s
        with self._lock:
            for response_id in response_ids:
                entry = self._records.get(response_id)
                if entry is not None:
                    # Also the newest for eviction: a conversation in use is evicted last.
                    self._records[response_id] = (expires_at, entry[1])
                    self._records.move_to_end(response_id)

    def _drop(self, response_id: str) -> Optional[tuple[float, str]]:
        entry = self._records.pop(response_id, None)
        if entry is not None:
            self._bytes -= len(entry[1])
        return entry

    def _encoded(self, record: Record) -> str:
        encoded = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        if len(encoded) > self.max_bytes:
            raise ResponseStoreUnavailable(f"the record ({len(encoded)} characters) exceeds "
                                           f"sessions.inprocess_max_response_bytes ({self.max_bytes})")
        return encoded

    def _put(self, record_id: str, encoded: str) -> None:
        """(Under the lock.)"""
        self._drop(record_id)
        self._records[record_id] = (self._clock() + self.ttl_s, encoded)
        self._bytes += len(encoded)
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._records)))

    async def put(self, response_id: str, record: Record) -> None:
        encoded = self._encoded(record)
        with self._lock:
            self._put(response_id, encoded)

    async def update(self, record_id: str, change: Callable[[Optional[Record]], Optional[Record]]) -> Optional[Record]:
        with self._lock:
            new = change(self._live(record_id))
            if new is not None:
                self._put(record_id, self._encoded(new))
            return new

    async def delete(self, response_id: str) -> bool:
        with self._lock:
            entry = self._drop(response_id)
            return entry is not None and self._clock() < entry[0]


class RedisResponseStore:
    """One Redis string per response (``{prefix}{id}``, JSON, expiring after the TTL)."""

    backend = "redis"

    def __init__(self, url: str, *, key_prefix: str, ttl_s: float, timeout_s: float, client: Any = None):
        self.key_prefix = key_prefix
        self.ttl_ms = max(1, int(round(ttl_s * 1000)))
        self.timeout_s = timeout_s
        self._client = client if client is not None else connect_redis(url, timeout_s)
        self._outage = OutageLog(log, url, what="response store", meanwhile="answering 503 to requests that "
                                 "read or write stored responses", metric="horizon_session_store_errors")

    async def _run(self, operation: str, coro: Any) -> Any:
        try:
            result = await asyncio.wait_for(coro, timeout=self.timeout_s * 4)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any storage failure is the same 503
            record_session_store_error(self.backend, f"response_{operation}")
            self._outage.failed(exc, operation=f"response_{operation}")
            raise ResponseStoreUnavailable(f"the response store is unreachable ({type(exc).__name__}); "
                                           "try again shortly", retry_after=2) from None
        self._outage.succeeded()
        return result

    async def get(self, response_id: str) -> Optional[Record]:
        return (await self.get_many([response_id]))[0]

    async def get_many(self, response_ids: list[str]) -> list[Optional[Record]]:
        if not response_ids:
            return []
        raw = await self._run("get", self._client.mget([self.key_prefix + i for i in response_ids]))
        return [_decoded(value) for value in raw]

    async def refresh(self, response_ids: list[str]) -> None:
        async def expire_all() -> Any:
            async with self._client.pipeline(transaction=False) as pipe:
                for response_id in response_ids:
                    pipe.pexpire(self.key_prefix + response_id, self.ttl_ms)
                return await pipe.execute()

        if response_ids:
            await self._run("refresh", expire_all())

    async def put(self, response_id: str, record: Record) -> None:
        encoded = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        await self._run("put", self._client.set(self.key_prefix + response_id, encoded, px=self.ttl_ms))

    async def delete(self, response_id: str) -> bool:
        return bool(await self._run("delete", self._client.delete(self.key_prefix + response_id)))

    async def update(self, record_id: str, change: Callable[[Optional[Record]], Optional[Record]]) -> Optional[Record]:
        from redis.exceptions import WatchError

        key = self.key_prefix + record_id

        async def check_and_set() -> Optional[Record]:
            # Optimistic: WATCH the key, compute, and write in MULTI; another writer in between
            # makes EXEC fail and the change runs again on what that writer left.
            async with self._client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(key)
                        new = change(_decoded(await pipe.get(key)))
                        if new is None:
                            await pipe.unwatch()
                            return None
                        pipe.multi()
                        pipe.set(key, json.dumps(new, ensure_ascii=False, separators=(",", ":")), px=self.ttl_ms)
                        await pipe.execute()
                        return new
                    except WatchError:
                        continue

        return await self._run("update", check_and_set())

    async def aclose(self) -> None:
        try:
            await self._client.aclose()
        except Exception:  # noqa: BLE001 - closing a dead connection is not an error
            pass


def _decoded(raw: Optional[str]) -> Optional[Record]:
    if raw is None:
        return None
    try:
        record = json.loads(raw)
    except (TypeError, ValueError):
        return None   # a foreign or corrupt value is no stored response
    return record if isinstance(record, dict) else None


def build_response_store(settings: SessionSettings, *, conversations: bool = False) -> Optional[ResponseStore]:
    """The store the profile asks for (of responses, or with ``conversations`` of the
    Conversations API's conversations: the same kind of record store under its own keys); None
    when responses are not stored."""
    if not (settings.enabled and settings.store_responses):
        return None
    if settings.backend == "redis":
        prefix = settings.conversations_key_prefix if conversations else settings.responses_key_prefix
        return RedisResponseStore(settings.redis_url, key_prefix=prefix,
                                  ttl_s=settings.responses_ttl_s, timeout_s=settings.redis_timeout_s)
    return InProcessResponseStore(ttl_s=settings.responses_ttl_s, max_bytes=settings.inprocess_max_response_bytes)


__all__ = ["InProcessResponseStore", "RedisResponseStore", "ResponseStore", "ResponseStoreUnavailable",
           "build_response_store"]
