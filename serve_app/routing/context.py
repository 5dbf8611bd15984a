"""What the signals see of a request: the texts and features, extracted once and sanitised.

The request is an OpenAI chat body (a dict). Only a malformed body raises, and only
:class:`~serve_app.errors.InvalidRequest`; odd but valid content (empty text, image-only
messages, emoji, mixed scripts, lone surrogates from invalid ``\\u`` escapes) yields a context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..messages.view import last_user_index, strict_parts

@dataclass(frozen=True)
class RequestContext:
    """The routing view of one chat request."""

    # Text of the last user message (the thing being asked), sanitised.
    user_text: str
    # Every message's text joined: what the context-length signal measures.
    conversation_text: str
    # Images in the last user message / in the whole conversation.
    user_images: int
    conversation_images: int
    message_count: int
    # The part of user_text that is embedded: all of it when short, else head + tail.
    embed_text: str
    # The same of the user message before the asked one ("" without one): what a short
    # follow-up refers to.
    previous_embed_text: str = ""

    @property
    def has_image(self) -> bool:
        """Images in the asked message."""
        return self.user_images > 0

    @property
    def conversation_has_image(self) -> bool:
        """Images anywhere in the conversation: the model that answers reads them all, so a
        text follow-up about an earlier photo needs the vision model too (any other model would
        have to refuse the conversation)."""
        return self.conversation_images > 0

    @property
    def image_only(self) -> bool:
        return self.user_images > 0 and not self.user_text.strip()


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
    parsed = [strict_parts(m, i) for i, m in enumerate(messages)]
    # Without a user message, the last message is what the model will respond to.
    last = last_user_index(messages)
    asked_index = len(messages) - 1 if last is None else last
    asked = parsed[asked_index]
    user_text = asked.text.strip()
    before = last_user_index(messages[:asked_index])
    previous_text = parsed[before].text.strip() if before is not None else ""
    return RequestContext(
        user_text=user_text,
        conversation_text="".join(p.text for p in parsed),
        user_images=asked.images,
        conversation_images=sum(p.images for p in parsed),
        message_count=len(messages),
        embed_text=embed_window(user_text, max_embed_chars),
        previous_embed_text=embed_window(previous_text, max_embed_chars),
    )
