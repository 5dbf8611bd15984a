"""Request parsing: odd but valid input gives a context; malformed input is a clean 400."""

import pytest

from serve_app.errors import InvalidRequest
from serve_app.routing.context import build_context, embed_window


def test_last_user_message_is_the_asked_text_and_conversation_is_measured():
    ctx = build_context({"messages": [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": [{"type": "text", "text": "second"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
    ]}, max_embed_chars=100)
    assert ctx.user_text == "second" and ctx.user_images == 1 and ctx.has_image
    assert len(ctx.conversation_text) == len("be nice") + len("first") + len("reply") + len("second")


def test_an_image_in_an_earlier_turn_is_an_image_in_the_conversation_not_in_the_asked_message():
    ctx = build_context({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "my floor plan"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": "two bedrooms"},
        {"role": "user", "content": "does a king size bed fit the second one?"},
    ]}, max_embed_chars=100)
    assert ctx.user_images == 0 and ctx.conversation_images == 1
    assert ctx.conversation_has_image and not ctx.has_image and not ctx.image_only
    text_only = build_context({"messages": [{"role": "user", "content": "hi"}]}, max_embed_chars=100)
    assert not text_only.conversation_has_image


def test_lone_surrogates_from_invalid_escapes_are_replaced():
    ctx = build_context({"messages": [{"role": "user", "content": "bad \ud800 text"}]}, max_embed_chars=100)
    ctx.user_text.encode("utf-8")  # would raise on a surrogate
    assert ctx.user_text.startswith("bad ") and ctx.user_text.endswith(" text")


def test_embed_window_keeps_head_and_tail():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    window = embed_window(text, 100)
    assert window.startswith("HEAD") and window.endswith("TAIL") and len(window) < 120
    assert embed_window("short", 100) == "short"


@pytest.mark.parametrize("body", [
    {},
    {"messages": []},
    {"messages": "hello"},
    {"messages": ["hello"]},
    {"messages": [{"role": "user", "content": 42}]},
    {"messages": [{"role": "user", "content": ["text"]}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
])
def test_malformed_bodies_raise_invalid_request(body):
    with pytest.raises(InvalidRequest):
        build_context(body, max_embed_chars=100)
