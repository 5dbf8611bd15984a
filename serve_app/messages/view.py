"""One view of an OpenAI chat message: its parts, text, images, and one token estimate (and
the message of an answer: :func:`first_message`).

Every layer that looks inside a message (routing, sessions, Fusion, output contracts, image
checks, context-length checks, the embeddings endpoint) reads it through these functions, so
they agree on what a text part and an image part are and on what a prompt costs.

A message ``content`` is a string, ``None``, or a list of parts; a part is a dict with a
``type``. The lenient readers here skip what they do not understand; :func:`strict_parts`
raises the 400 the routing layer needs for a malformed body.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from ..errors import InvalidRequest

Message = dict[str, Any]

# Part types, once. The ``input_*`` forms are the Responses API's; some clients send them in chat.
TEXT_PART_TYPES = frozenset({"text", "input_text"})
IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})
AUDIO_PART_TYPES = frozenset({"input_audio", "audio"})

# The token estimate: ~4 characters per token for Latin text, ~1 per CJK character, a few tokens
# of chat-template framing per message, and a flat cost per image (MiniCPM-V slices an image
# into a few hundred tokens). It errs high on purpose: trimming a little early is cheap,
# overflowing a context is a failed request. Engines still make the exact check behind it.
CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 768


def first_choice(response: dict[str, Any]) -> dict[str, Any]:
    """The first choice of a ``chat.completion`` answer ({} when it has none or a malformed one)."""
    choices = response.get("choices") or []
    return choices[0] if choices and isinstance(choices[0], dict) else {}


def first_message(response: dict[str, Any]) -> dict[str, Any]:
    """The assistant message of a ``chat.completion`` answer's first choice ({} when none)."""
    message = first_choice(response).get("message")
    return message if isinstance(message, dict) else {}


def clean(text: str) -> str:
    """``text`` without lone surrogates (JSON ``"\\ud800"``), which tokenizers and UTF-8 reject."""
    return text.encode("utf-8", "replace").decode("utf-8")


def parts(content: Any) -> list[dict[str, Any]]:
    """``content`` as a list of parts (a string is one text part); odd items are dropped."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [p for p in content if isinstance(p, dict)]
    return [{"type": "text", "text": str(content)}]


def is_text(part: dict[str, Any]) -> bool:
    return part.get("type") in TEXT_PART_TYPES


def is_image(part: dict[str, Any]) -> bool:
    return part.get("type") in IMAGE_PART_TYPES


def text_of(content: Any, *, placeholders: bool = False) -> str:
    """The text parts of ``content`` joined by newlines; with ``placeholders`` images and audio
    become ``[image]`` / ``[audio]`` markers (a text-only model's view of them)."""
    pieces = []
    for part in parts(content):
        if is_text(part):
            pieces.append(str(part.get("text", "")))
        elif placeholders and is_image(part):
            pieces.append("[image]")
        elif placeholders and part.get("type") in AUDIO_PART_TYPES:
            pieces.append("[audio]")
    return "\n".join(pieces)


def image_count(content: Any) -> int:
    return sum(1 for part in parts(content) if is_image(part))


def has_image(messages: Sequence[Message]) -> bool:
    return any(isinstance(m, dict) and image_count(m.get("content")) for m in messages)


def image_parts(messages: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(param path, part) of every image part, in message order, for checks that name the part."""
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and is_image(part):
                yield f"messages[{i}].content[{j}]", part


@dataclass(frozen=True)
class MessageText:
    """The text and image count of one message, read strictly (see :func:`strict_parts`)."""

    text: str
    images: int


def strict_parts(message: Any, index: int) -> MessageText:
    """Text and images of ``messages[index]``; raises InvalidRequest (400) for a malformed one.

    Odd but valid content (empty text, image-only, audio or file parts, lone surrogates) is
    accepted: only a shape no client should send is an error.
    """
    if not isinstance(message, dict):
        raise InvalidRequest(f"messages[{index}] must be an object", param="messages")
    content = message.get("content")
    if content is None:
        return MessageText("", 0)
    if isinstance(content, str):
        return MessageText(clean(content), 0)
    if not isinstance(content, list):
        raise InvalidRequest(f"messages[{index}].content must be a string or a list of parts",
                             param="messages")
    texts: list[str] = []
    images = 0
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"messages[{index}].content[{j}] must be an object", param="messages")
        if is_text(part):
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"messages[{index}].content[{j}].text must be a string",
                                     param="messages")
            texts.append(clean(text))
        elif is_image(part):
            images += 1
    return MessageText("\n".join(texts), images)


# --------------------------------------------------------------------------- token estimate


def estimate_text_tokens(text: str, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """Tokens of plain text: one per CJK character, else one per ``chars_per_token`` characters."""
    if text.isascii():  # no CJK: skip the per-character scan (every routed request comes here)
        return math.ceil(len(text) / chars_per_token)
    cjk = sum(1 for ch in text if "\u2e80" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"
              or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef")
    return cjk + math.ceil((len(text) - cjk) / chars_per_token)


def estimate_content_tokens(content: Any, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    return sum(estimate_text_tokens(str(p.get("text", "")), chars_per_token) if is_text(p)
               else IMAGE_TOKENS if is_image(p) else 0
               for p in parts(content))


def estimate_tokens(messages: Sequence[Message], chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """The estimate of chat messages: their content, framing, and any tool calls they carry."""
    total = 0
    for m in messages:
        total += MESSAGE_OVERHEAD_TOKENS + estimate_content_tokens(m.get("content"), chars_per_token)
        if m.get("tool_calls"):
            total += estimate_text_tokens(json.dumps(m["tool_calls"], ensure_ascii=False), chars_per_token)
    return total


def last_user_index(messages: Sequence[Message]) -> Optional[int]:
    """Index of the message being asked: the last user message (None without one)."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "user":
            return i
    return None
