"""Per-model deadlines on the first token and on the whole call.

SPEC §6 gives k2 120 s, text models 60 s, vision 30 s (``models[].timeouts``), multiplied by
``resilience.timeout_scale``. The clock starts when the model call starts: time spent waiting
in the ingress admission queue is bounded by the queue's own ``max_wait_s`` and is no sign of
the model's health, so it must not feed the breaker as a timeout.

* ``complete()`` has no observable first token: only ``total_s`` bounds it.
* ``stream()``: until the first chunk that carries content (text, reasoning, a tool call or a
  finish reason) the call is bounded by ``first_token_s``; the whole stream by ``total_s``.
  Chunks that come before the first content (the role-only opening chunk) are held back, so a
  timeout before the first token leaves nothing sent and the caller may still fall back.
  After content has been sent there is no silent switch to another model: the caller ends the
  stream with :func:`error_chunk` (then the API layer writes ``[DONE]``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator

from ..fleet.protocol import ChatChunk, ChatRequest, ChatResponse, ModelClient
from ..messages.chunks import Chunk
from ..config.schema import HorizonConfig
from ..errors import HorizonError, UpstreamError, UpstreamTimeout


@dataclass(frozen=True)
class Deadlines:
    first_token_s: float
    total_s: float

    @classmethod
    def for_model(cls, config: HorizonConfig, alias: str) -> "Deadlines":
        t = config.model(alias).timeouts
        scale = config.resilience.timeout_scale
        return cls(first_token_s=t.first_token_s * scale, total_s=t.total_s * scale)


def _timeout(alias: str, phase: str, limit_s: float) -> UpstreamTimeout:
    what = "produced no first token" if phase == "first_token" else "did not finish"
    return UpstreamTimeout(f"model {alias} {what} within {limit_s:g} s",
                           details={"model": alias, "phase": phase, "limit_s": limit_s})


async def complete_within(client: ModelClient, request: ChatRequest, deadlines: Deadlines) -> ChatResponse:
    """``client.complete`` bounded by ``deadlines.total_s`` (UpstreamTimeout when exceeded)."""
    try:
        # asyncio.timeout, not wait_for: no extra task per model call.
        async with asyncio.timeout(deadlines.total_s):
            return await client.complete(request)
    except TimeoutError:
        raise _timeout(client.alias, "total", deadlines.total_s) from None


def has_content(chunk: ChatChunk) -> bool:
    """Does this chunk carry something the client would see as output (text, reasoning, a tool
    call, a refusal, a finish reason)? (Parses the chunk: only the few chunks before the first
    content are looked at.)"""
    for choice in chunk.data.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls") or delta.get("refusal"):
            return True
        if choice.get("text"):  # a text completion's chunk
            return True
        if choice.get("finish_reason"):
            return True
    return False


async def stream_within(client: ModelClient, request: ChatRequest,
                        deadlines: Deadlines) -> AsyncIterator[ChatChunk]:
    """``client.stream`` under both deadlines; raises UpstreamTimeout when one passes.

    Chunks before the first content are buffered and released together with it.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    total_at = started + deadlines.total_s
    first_token_at = started + min(deadlines.first_token_s, deadlines.total_s)
    upstream = client.stream(request).__aiter__()
    held: list[ChatChunk] = []
    content_seen = False
    try:
        while True:
            limit_at = total_at if content_seen else first_token_at
            try:
                # A deadline per chunk without a task per chunk (wait_for would create one).
                async with asyncio.timeout_at(limit_at):
                    chunk = await upstream.__anext__()
            except StopAsyncIteration:
                break
            except TimeoutError:
                if content_seen or first_token_at >= total_at:
                    raise _timeout(client.alias, "total", deadlines.total_s) from None
                raise _timeout(client.alias, "first_token", deadlines.first_token_s) from None
            if content_seen:
                yield chunk
                continue
            held.append(chunk)
            if has_content(chunk):
                content_seen = True
                for early in held:
                    yield early
                held.clear()
        # A stream that ended without content (an empty answer) still delivers its chunks.
        for early in held:
            yield early
    finally:
        closer = getattr(upstream, "aclose", None)
        if closer is not None:
            try:
                await closer()
            except Exception:
                pass  # the upstream is being abandoned; its close errors change nothing


def as_horizon_error(exc: BaseException, alias: str) -> HorizonError:
    """Any failure of a model call as a HorizonError (unknown exceptions become 502)."""
    if isinstance(exc, HorizonError):
        return exc
    return UpstreamError(f"model {alias} failed: {type(exc).__name__}: {exc}",
                         details={"model": alias})


def error_chunk(exc: BaseException, alias: str) -> Chunk:
    """The last event of a stream that failed after content was sent: an OpenAI error object
    (``{"error": {...}}``); the API layer frames it as an SSE event followed by ``[DONE]``."""
    return Chunk(as_horizon_error(exc, alias).body())
