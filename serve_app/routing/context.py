"""What the signals see of a request: the texts and features, extracted once and sanitised.

The request is an OpenAI chat body (a dict). Only a malformed body raises, and only
:class:`~serve_app.errors.InvalidRequest`; odd but valid content (empty text, image-only
messages, emoji, mixed scripts, lone surrogates from invalid ``\\u`` escapes) yields a context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest

_TEXT_PART_TYPES = {"text", "input_text"}
_IMAGE_PART_TYPES = {"image_url", "input_image", "image"}


def _clean(text: str) -> str:
    # JSON "\ud800" decodes to a lone surrogate that tokenizers and UTF-8 encoders reject.
    return text.encode("utf-8", "replace").decode("utf-8")


@dataclass(frozen=True)
class RequestContext:
    """The routing view of one chat request."""

    # Text of the last user message (the thing being asked), sanitised.
    user_text: str
    # Every message's text joined: what the context-length signal measures.
    conversation_chars: int
    # Images in the last user message / in the whole conversation.
    user_images: int
    conversation_images: int
    message_count: int
    # The part of user_text that is embedded: all of it when short, else head + tail.
    embed_text: str

    @property
    def has_image(self) -> bool:
        return self.user_images > 0

    @property
    def image_only(self) -> bool:
        return self.user_images > 0 and not self.user_text.strip()


def _message_parts(message: Any, index: int) -> tuple[str, int]:
    """(text, image count) of one message; raises InvalidRequest for a malformed one."""
    if not isinstance(message, dict):
        raise InvalidRequest(f"messages[{index}] must be an object", param="messages")
    content = message.get("content")
    if content is None:
        return "", 0
    if isinstance(content, str):
        return _clean(content), 0
    if not isinstance(content, list):
        raise InvalidRequest(f"messages[{index}].content must be a string or a list of parts",
                             param="messages")
    texts: list[str] = []
    images = 0
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"messages[{index}].content[{j}] must be an object", param="messages")
        kind = part.get("type")
        if kind in _TEXT_PART_TYPES:
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"messages[{index}].content[{j}].text must be a string",
                                     param="messages")
            texts.append(_clean(text))
        elif kind in _IMAGE_PART_TYPES:
            images += 1
        # Other part kinds (audio, files) carry no routing text; they are not an error here.
    return "\n".join(texts), images


def embed_window(text: str, max_chars: int) -> str:
    """Head and tail of a long text: instructions sit at the start or the end of big prompts."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return text[:half] + "\n...\n" + text[-half:]


def build_context(request: dict[str, Any], *, max_embed_chars: int) -> RequestContext:
    if not isinstance(request, dict):
        raise InvalidRequest("request body must be a JSON object")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list", param="messages")
    parsed = [_message_parts(m, i) for i, m in enumerate(messages)]
    roles = [m.get("role") for m in messages]
    user_indices = [i for i, role in enumerate(roles) if role == "user"]
    # Without a user message, the last message is what the model will respond to.
    last = user_indices[-1] if user_indices else len(messages) - 1
    user_text, user_images = parsed[last]
    user_text = user_text.strip()
    return RequestContext(
        user_text=user_text,
        conversation_chars=sum(len(text) for text, _ in parsed),
        user_images=user_images,
        conversation_images=sum(images for _, images in parsed),
        message_count=len(messages),
        embed_text=embed_window(user_text, max_embed_chars),
    )
