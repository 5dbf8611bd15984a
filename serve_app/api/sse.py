"""Server-sent events framing of chat chunks, with the stream's own error contract.

Chunks go out as the JSON text they came with (an engine's own, see
:class:`~serve_app.messages.chunks.Chunk`); only a chunk whose usage the client must not see,
or must see in a chunk of its own, is rewritten.
"""

from __future__ import annotations

import logging
from typing import AsyncIterator, Optional

from serve_app.errors import HorizonError
from serve_app.messages.chunks import Chunk

log = logging.getLogger("ray.serve")

DONE = b"data: [DONE]\n\n"


def encode(chunk: Chunk) -> bytes:
    return b"data: " + chunk.json().encode() + b"\n\n"


def _mentions_usage(chunk: Chunk) -> bool:
    return "usage" in chunk.data if chunk.parsed else '"usage"' in chunk.json()


def _without_usage(chunk: Chunk) -> Chunk:
    return Chunk({k: v for k, v in chunk.data.items() if k != "usage"})


async def sse_stream(first: Optional[Chunk], rest: AsyncIterator[Chunk], *,
                     include_usage: bool) -> AsyncIterator[bytes]:
    """Frame chunks as SSE. Models are always asked for usage; a client that did not ask for it
    gets none, one that did gets it in OpenAI's own final chunk with empty choices. A failure
    after the first chunk ends the stream with an error event and ``[DONE]``: content already
    sent cannot be taken back, so there is no silent switch."""
    usage_chunk: Optional[Chunk] = None

    async def chunks() -> AsyncIterator[Chunk]:
        if first is not None:
            yield first
        async for chunk in rest:
            yield chunk

    try:
        async for chunk in chunks():
            if not include_usage:
                if chunk.is_usage_only:
                    continue
                if _mentions_usage(chunk):
                    chunk = _without_usage(chunk)
            elif chunk.carries_usage() and not chunk.is_usage_only:
                # Usage riding on a content chunk moves to its own final chunk.
                usage_chunk = Chunk({**chunk.data, "choices": []})
                chunk = _without_usage(chunk)
            yield encode(chunk)
        if usage_chunk is not None:
            yield encode(usage_chunk)
    except HorizonError as exc:
        log.warning("stream failed after it started: %s", exc.message)
        yield encode(Chunk(exc.body()))
    except Exception:  # noqa: BLE001 — never a stack trace to the client
        log.exception("stream failed after it started")
        yield encode(Chunk(HorizonError("the stream failed on the server").body()))
    yield DONE
