"""OpenAI message plumbing for Fusion sub-calls.

Panel and analysis calls are text-only: they never receive ``tools`` / ``tool_choice`` and see
the conversation's tool traffic as plain text (engines reject ``tool`` messages in a request
without tools). Only the final call keeps the client's tool settings.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional

from ..messages.view import first_message, text_of

# Keys that make a call tool-capable or shape the client-facing output; only the final call
# keeps them.
_FINAL_ONLY_KEYS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
                    "response_format")
# Keys Fusion owns for every sub-call: it never streams sub-calls and asks for one choice.
_NEVER_FORWARDED = ("model", "stream", "stream_options", "plugins", "n", "messages",
                    "max_tokens", "max_completion_tokens", "temperature")


def content_text(content: Any) -> str:
    """Text of a message ``content`` for a text-only call; images and audio become markers."""
    return text_of(content, placeholders=True)


def _tool_calls_text(tool_calls: Iterable[dict[str, Any]]) -> str:
    lines = []
    for call in tool_calls or ():
        fn = call.get("function") or {}
        lines.append(f"[called tool {fn.get('name', '?')} (id {call.get('id', '?')}) "
                     f"with arguments {fn.get('arguments', '')}]")
    return "\n".join(lines)


def _tool_result_text(message: dict[str, Any]) -> str:
    label = message.get("name") or message.get("tool_call_id") or "tool"
    return f"[result of tool {label} (id {message.get('tool_call_id', '?')})]\n" \
           f"{content_text(message.get('content'))}"


def text_only_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The full history for a tool-less call: tool calls and tool results become text.

    A tool result becomes a user turn. It is merged with a neighbouring user turn so chat
    templates that require alternating roles still accept the history.
    """
    out: list[dict[str, Any]] = []
    from_tool: list[bool] = []
    for message in messages:
        role = message.get("role")
        is_tool = role in ("tool", "function")
        if is_tool:
            converted = {"role": "user", "content": _tool_result_text(message)}
        elif role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
            calls = message.get("tool_calls") or [{"function": message.get("function_call")}]
            text = "\n".join(t for t in (content_text(message.get("content")), _tool_calls_text(calls)) if t)
            converted = {"role": "assistant", "content": text}
        else:
            converted = {k: v for k, v in message.items() if k not in ("tool_calls", "function_call")}
        mergeable = (out and (is_tool or from_tool[-1]) and out[-1].get("role") == converted["role"]
                     and isinstance(out[-1].get("content"), str)
                     and isinstance(converted.get("content"), str))
        if mergeable:
            out[-1]["content"] = f"{out[-1]['content']}\n\n{converted['content']}"
            from_tool[-1] = True
            continue
        out.append(converted)
        from_tool.append(is_tool)
    return out


def transcript(messages: list[dict[str, Any]]) -> str:
    """The conversation as labelled text for a judge prompt (``{{original}}``)."""
    blocks = []
    for message in messages:
        role = message.get("role", "user")
        if role in ("tool", "function"):
            blocks.append(_tool_result_text(message))
            continue
        text = content_text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            text = "\n".join(t for t in (text, _tool_calls_text(message["tool_calls"])) if t)
        blocks.append(f"[{role}]\n{text}")
    return "\n\n".join(blocks)


def context_text(messages: list[dict[str, Any]]) -> str:
    """Reference material the request carries: system prompts and tool results."""
    parts = [content_text(m.get("content")) for m in messages if m.get("role") == "system"]
    parts += [content_text(m.get("content")) for m in messages if m.get("role") in ("tool", "function")]
    return "\n\n".join(p for p in parts if p.strip())


def sub_request(request: dict[str, Any], messages: list[dict[str, Any]], *,
                temperature: Optional[float], max_completion_tokens: Optional[int],
                final: bool) -> dict[str, Any]:
    """A Fusion sub-call body built from the client's request.

    Sampling fields the client sent are kept unless Fusion sets its own; ``final`` keeps the
    client's tool and output-format settings, every other call is text-only.
    """
    body = {k: v for k, v in request.items() if k not in _NEVER_FORWARDED}
    if not final:
        for key in _FINAL_ONLY_KEYS:
            body.pop(key, None)
    body["messages"] = messages
    body["stream"] = False
    if temperature is None:
        temperature = request.get("temperature")
    if temperature is not None:
        body["temperature"] = temperature
    if max_completion_tokens is None:
        max_completion_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
    if max_completion_tokens is not None:
        # Both names: engines and simulators differ in which one they read.
        body["max_completion_tokens"] = max_completion_tokens
        body["max_tokens"] = max_completion_tokens
    return body


def reasoning_of(message: dict[str, Any]) -> str:
    return message.get("reasoning_content") or message.get("reasoning") or ""


def answer_text(response: dict[str, Any]) -> str:
    """What a panel answer contributes: its content, else its reasoning (trimmed)."""
    message = first_message(response)
    content = content_text(message.get("content")).strip()
    return content or str(reasoning_of(message)).strip()


def is_usable(response: dict[str, Any]) -> bool:
    """SPEC §5: usable when the trimmed content or reasoning is non-empty."""
    return bool(answer_text(response))


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def sum_usage(usages: Iterable[Optional[dict[str, Any]]]) -> dict[str, int]:
    total = {k: 0 for k in _USAGE_KEYS}
    for usage in usages:
        if not usage:
            continue
        for key in _USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, (int, float)):
                total[key] += int(value)
    if not total["total_tokens"]:
        total["total_tokens"] = total["prompt_tokens"] + total["completion_tokens"]
    return total


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
