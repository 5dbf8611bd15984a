"""Turn a finished answer into ``chat.completion.chunk`` dicts (the replay of a response).

Fusion streams only after every stage has finished (the judge needs the whole panel), and a
checked JSON answer only once it is complete, so those streams are a replay of the final response: a role chunk, content (or reasoning) pieces, or tool
call deltas in OpenAI's shape, a finish chunk, and the usage chunk when the client asked for
``stream_options.include_usage``. SSE framing and ``data: [DONE]`` are the ingress's job.
"""

from __future__ import annotations

from typing import Any, Optional

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
    choice = (response.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    tool_calls = message.get("tool_calls") or []
    finish_reason = "tool_calls" if tool_calls else (choice.get("finish_reason") or "stop")
    base = {"id": response.get("id"), "object": "chat.completion.chunk",
            "created": response.get("created"), "model": response.get("model")}
    if response.get("system_fingerprint"):
        base["system_fingerprint"] = response["system_fingerprint"]

    def chunk(delta: dict[str, Any], finish: Optional[str] = None) -> dict[str, Any]:
        out = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                    "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None   # OpenAI: only the last chunk carries usage
        return out

    chunks = [chunk({"role": "assistant", "content": ""})]
    reasoning = message.get("reasoning_content") or ""
    chunks += [chunk({"reasoning_content": piece}) for piece in split_text(reasoning, piece_chars)]
    content = message.get("content") or ""
    chunks += [chunk({"content": piece}) for piece in split_text(content, piece_chars)]
    for position, call in enumerate(tool_calls):
        function = call.get("function") or {}
        chunks.append(chunk({"tool_calls": [{
            "index": position, "id": call.get("id"), "type": call.get("type", "function"),
            "function": {"name": function.get("name"), "arguments": ""}}]}))
        chunks += [chunk({"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
                   for piece in split_text(function.get("arguments") or "", piece_chars)]
    final = chunk({}, finish_reason)
    if response.get("fusion") is not None:
        # Non-standard but ignored by OpenAI clients: operators get the trace in streams too.
        final["fusion"] = response["fusion"]
    chunks.append(final)
    if include_usage:
        chunks.append({**base, "choices": [], "usage": response.get("usage")})
    return chunks
