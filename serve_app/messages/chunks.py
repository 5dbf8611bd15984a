"""Stream chunks: :class:`Chunk`, one ``chat.completion.chunk`` on its way from an engine to the
client, and the replay of a finished answer as chunks.

An engine's chunk arrives as JSON text (vLLM's OpenAI server writes it) and the client wants that
same JSON text: a :class:`Chunk` keeps the text and parses it only if a layer looks inside (the
first-token deadline until the first content, a session recording the answer). The SSE writer
sends the kept text, so a plain stream is never parsed and re-serialised on its way through.
Chunks built in the gateway (the simulated engine's, replays, error events) hold their data.

The replay: Fusion streams only after every stage has finished (the judge needs the whole
panel), and a checked JSON answer only once it is complete, so those streams are a replay of the
final response:
Fusion streams only after every stage has finished (the judge needs the whole panel), and a
checked JSON answer only once it is complete, so those streams are a replay of the final response: a role chunk, content (or reasoning) pieces, or tool
call deltas in OpenAI's shape, a finish chunk, and the usage chunk when the client asked for
``stream_options.include_usage``. SSE framing and ``data: [DONE]`` are the ingress's job.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from ..json_wire import dumps_text, loads

class Chunk:
    """One ``chat.completion.chunk``: kept as the engine's JSON text, parsed only on demand."""

    __slots__ = ("_text", "_data")

    def __init__(self, data: Optional[dict[str, Any]] = None, *, text: Optional[str] = None):
        if (data is None) == (text is None):
            raise ValueError("a chunk is built from data or from JSON text, not both")
        self._data = data
        self._text = text

    @classmethod
    def of(cls, value: Union["Chunk", dict[str, Any]]) -> "Chunk":
        return value if isinstance(value, Chunk) else cls(value)

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = loads(self._text)  # type: ignore[arg-type]
        return self._data

    @property
    def parsed(self) -> bool:
        return self._data is not None

    def json(self) -> str:
        """The JSON text a client receives: the engine's own when the chunk came as text."""
        if self._text is None:
            self._text = dumps_text(self._data)
        return self._text

    @property
    def is_error(self) -> bool:
        """An OpenAI error object (``{"error": ...}``) instead of a chunk."""
        if self._data is not None:
            return "error" in self._data and not self._data.get("choices")
        return self._text.lstrip().startswith('{"error"')  # type: ignore[union-attr]

    @property
    def is_usage_only(self) -> bool:
        """The final usage chunk (empty ``choices``) OpenAI sends when asked for usage."""
        if self._data is not None:
            return "usage" in self._data and not self._data.get("choices")
        return '"choices":[]' in self._text and '"usage":' in self._text  # type: ignore[operator]

    def carries_usage(self) -> bool:
        if self._data is not None:
            return self._data.get("usage") is not None
        return '"usage":{' in self._text  # type: ignore[operator]

    def __repr__(self) -> str:
        return f"Chunk({self.json()[:120]})"


# Replayed text is cut into pieces of about this many characters, at whitespace, so clients
# render progressively without paying one event per token.
DEFAULT_PIECE_CHARS = 96


def split_text(text: str, piece_chars: int = DEFAULT_PIECE_CHARS) -> list[str]:
    """Pieces whose concatenation is exactly ``text``; cuts fall after whitespace when possible."""
    if not text:
        return []
    pieces, start = [], 0
    while start < len(text):
        end = min(len(text), start + piece_chars)
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            if cut > start:
                end = cut + 1
        pieces.append(text[start:end])
        start = end
    return pieces


def response_to_chunks(response: dict[str, Any], include_usage: bool, *,
                       piece_chars: int = DEFAULT_PIECE_CHARS) -> list[dict[str, Any]]:
    """The chunks of a finished ``chat.completion``: every choice in turn (``n`` > 1 keeps each
    choice's index), then the usage chunk when asked for."""
    base = {"id": response.get("id"), "object": "chat.completion.chunk",
            "created": response.get("created"), "model": response.get("model")}
    if response.get("system_fingerprint"):
        base["system_fingerprint"] = response["system_fingerprint"]

    def chunk(index: int, delta: dict[str, Any], finish: Optional[str] = None) -> dict[str, Any]:
        out = {**base, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                    "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None   # OpenAI: only the last chunk carries usage
        return out

    chunks: list[dict[str, Any]] = []
    choices = response.get("choices") or [{}]
    for position, choice in enumerate(choices):
        index = choice.get("index", position)
        message = choice.get("message") or {}
        tool_calls = message.get("tool_calls") or []
        finish_reason = "tool_calls" if tool_calls else (choice.get("finish_reason") or "stop")
        chunks.append(chunk(index, {"role": "assistant", "content": ""}))
        reasoning = message.get("reasoning_content") or ""
        chunks += [chunk(index, {"reasoning_content": piece}) for piece in split_text(reasoning, piece_chars)]
        content = message.get("content") or ""
        chunks += [chunk(index, {"content": piece}) for piece in split_text(content, piece_chars)]
        # OpenAI streams a refusal in ``delta.refusal`` (the SDK's accumulator builds
        # ``message.refusal`` from it).
        chunks += [chunk(index, {"refusal": piece}) for piece in split_text(message.get("refusal") or "", piece_chars)]
        for call_index, call in enumerate(tool_calls):
            function = call.get("function") or {}
            chunks.append(chunk(index, {"tool_calls": [{
                "index": call_index, "id": call.get("id"), "type": call.get("type", "function"),
                "function": {"name": function.get("name"), "arguments": ""}}]}))
            chunks += [chunk(index, {"tool_calls": [{"index": call_index, "function": {"arguments": piece}}]})
                       for piece in split_text(function.get("arguments") or "", piece_chars)]
        chunks.append(chunk(index, {}, finish_reason))
    if response.get("fusion") is not None:
        # Non-standard but ignored by OpenAI clients: operators get the trace in streams too.
        chunks[-1]["fusion"] = response["fusion"]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": response.get("usage")})
    return chunks
