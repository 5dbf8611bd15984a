"""Session history in Redis: one list per (session, task type), shared by all ingress replicas.

Each bucket is a Redis list of JSON messages under ``{prefix}{session}:{task}``. A turn is
appended with RPUSH + LTRIM + PEXPIRE inside one MULTI/EXEC transaction, so concurrent turns on
one session interleave whole and never lose a message, the bucket stays bounded, and its TTL is
refreshed on every write.

Redis is a convenience, not a dependency of answering: when it is unreachable (or any Redis
command fails) ``history`` returns [] and ``append`` does nothing, the failure is counted in
``horizon_session_store_errors``, and one warning is logged per outage (an info line marks
recovery). Commands run with a short deadline and no client-side retries so an outage costs a
request milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from ..redis_client import OutageLog, connect_redis
from ..observability.metrics import record_session_store_error
from .buckets import bucket_key, check_bucket

log = logging.getLogger(__name__)


class RedisSessionStore:
    backend = "redis"

    def __init__(self, url: str, *, key_prefix: str, ttl_s: float, max_messages: int,
                 timeout_s: float, client: Any = None):
        self.url = url
        self.key_prefix = key_prefix
        self.ttl_ms = max(1, int(round(ttl_s * 1000)))
        self.max_messages = max_messages
        self.timeout_s = timeout_s
        self._client = client if client is not None else connect_redis(url, timeout_s)
        self._outage = OutageLog(log, url, what="session store", meanwhile="serving without history",
                                 metric="horizon_session_store_errors")

    def key(self, session_id: str, task_type: str) -> str:
        return bucket_key(self.key_prefix, session_id, task_type)

    async def _run(self, operation: str, coro: Any) -> tuple[bool, Any]:
        try:
            # The socket timeouts bound each I/O; this bounds the whole command (DNS, pool wait).
            result = await asyncio.wait_for(coro, timeout=self.timeout_s * 4)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any storage failure degrades, never fails
            record_session_store_error(self.backend, operation)
            self._outage.failed(exc, operation=operation)
            return False, None
        self._outage.succeeded()
        return True, result

    # ------------------------------------------------------------------ SessionStore
    async def history(self, session_id: str, task_type: str) -> list[dict]:
        check_bucket(session_id, task_type)
        ok, raw = await self._run("history", self._client.lrange(self.key(session_id, task_type), 0, -1))
        if not ok:
            return []
        messages: list[dict] = []
        for item in raw or []:
            try:
                message = json.loads(item)
            except (TypeError, ValueError):
                continue  # a foreign or corrupt entry must not break the whole history
            if isinstance(message, dict):
                messages.append(message)
        return messages

    async def append(self, session_id: str, task_type: str, messages: list[dict]) -> None:
        check_bucket(session_id, task_type)
        if not messages:
            return
        key = self.key(session_id, task_type)
        encoded = [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in messages]

        async def transaction() -> Any:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.rpush(key, *encoded)
                pipe.ltrim(key, -self.max_messages, -1)
                pipe.pexpire(key, self.ttl_ms)
                return await pipe.execute()

        await self._run("append", transaction())

    async def ping(self) -> bool:
        ok, _ = await self._run("ping", self._client.ping())
        return ok

    async def health(self) -> dict[str, Any]:
        """Whether Redis answers now (one PING), and the outage so far when it does not."""
        await self.ping()
        return self._outage.snapshot()

    async def aclose(self) -> None:
        try:
            await self._client.aclose()
        except Exception:  # noqa: BLE001 - closing a dead connection is not an error
            pass


__all__ = ["RedisSessionStore"]
