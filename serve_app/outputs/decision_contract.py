"""A decision's ``output_contract``: operator text that shapes every answer the decision gives.

The text is appended to the system prompt of the request the decision's model receives, on
every path that decision runs (the first model and each fallback). Fusion puts the same text
into its synthesis prompt itself (``serve_app.fusion.judge.final_prompt``); this module is for
the single-model paths.
"""

from __future__ import annotations

from typing import Any, Optional

from ..messages.view import text_of

Message = dict[str, Any]

_SYSTEM_ROLES = ("system", "developer")
# Between the client's system prompt and the appended text: a blank line reads as a new section
# to every chat template we serve.
_SEPARATOR = "\n\n"


def append_system_text(messages: list[Message], text: str) -> list[Message]:
    """``messages`` with ``text`` appended to the leading system message (one is added in front
    when there is none). A copy; the input is not changed. Appending text that the system
    message already ends with is a no-op, so a request that goes through this twice (a retry,
    a fallback hop) does not carry the text twice."""
    text = text.strip()
    out = [dict(m) for m in messages]
    if not text:
        return out
    if out and out[0].get("role") in _SYSTEM_ROLES:
        first = out[0]
        content = first.get("content")
        if text_of(content).rstrip().endswith(text):
            return out
        if isinstance(content, list):
            first["content"] = [*content, {"type": "text", "text": text}]
        else:
            existing = (content or "").rstrip()
            first["content"] = f"{existing}{_SEPARATOR}{text}" if existing else text
        return out
    return [{"role": "system", "content": text}, *out]


def apply_output_contract(messages: list[Message], contract_text: Optional[str]) -> list[Message]:
    """The decision's ``output_contract`` appended to the prompt as system text (unchanged copy
    when the decision has none)."""
    return append_system_text(messages, contract_text or "")
