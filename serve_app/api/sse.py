"""Server-sent events framing of chat chunks, with the stream's own error contract."""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Optional

from serve_app.errors import HorizonError

log = logging.getLogger("ray.serve")

DONE = b"data: [DONE]\n\n"


def encode(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _client_view(chunk: dict[str, Any], include_usage: bool) -> Optional[dict[str, Any]]:
    """Drop usage the client did not ask for (models are always asked for it internally)."""
    if include_usage or "usage" not in chunk:
        return chunk
    if not chunk.get("choices"):
        return None
    return {k: v for k, v in chunk.items() if k != "usage"}


async def sse_stream(first: Optional[dict[str, Any]], rest: AsyncIterator[dict[str, Any]],
                     *, include_usage: bool) -> AsyncIterator[bytes]:
    """Frame chunks as SSE. A failure after the first chunk ends the stream with an error event
    and ``[DONE]`` — content already sent cannot be taken back, so there is no silent switch."""
    usage_chunk: Optional[dict[str, Any]] = None
    try:
        chunks = [first] if first is not None else []
        for chunk in chunks:
            view = _client_view(chunk, include_usage)
            if view is not None:
                yield encode(view)
        async for chunk in rest:
            if include_usage and chunk.get("usage") and chunk.get("choices"):
                # OpenAI sends usage in its own final chunk with empty choices.
                usage_chunk = {**chunk, "choices": []}
                chunk = {k: v for k, v in chunk.items() if k != "usage"}
            view = _client_view(chunk, include_usage)
            if view is not None:
                yield encode(view)
        if usage_chunk is not None:
            yield encode(usage_chunk)
    except HorizonError as exc:
        log.warning("stream failed after it started: %s", exc.message)
        yield encode(exc.body())
    except Exception:  # noqa: BLE001 — never a stack trace to the client
        log.exception("stream failed after it started")
        yield encode(HorizonError("the stream failed on the server").body())
    yield DONE
