"""The one view of a chat message every layer reads: parts, text, images, token estimate."""

import pytest

from serve_app.errors import InvalidRequest
from serve_app.messages.view import (IMAGE_TOKENS, MESSAGE_OVERHEAD_TOKENS, estimate_text_tokens,
                                     estimate_tokens, has_image, image_parts, last_user_index,
                                     strict_parts, text_of)

IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


@pytest.mark.parametrize("part", [IMG, {"type": "input_image", "image_url": "x"}, {"type": "image"}])
def test_every_image_part_form_counts_as_an_image_everywhere(part):
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this"}, part]}]
    assert has_image(messages)
    assert strict_parts(messages[0], 0).images == 1
    assert [path for path, _ in image_parts(messages)] == ["messages[0].content[1]"]
    assert estimate_tokens(messages) == MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens("what is this") + IMAGE_TOKENS


def test_text_of_joins_text_parts_and_optionally_marks_media():
    content = [{"type": "text", "text": "a"}, IMG, {"type": "input_text", "text": "b"},
               {"type": "input_audio", "input_audio": {}}]
    assert text_of(content) == "a\nb"
    assert text_of(content, placeholders=True) == "a\n[image]\nb\n[audio]"
    assert text_of("plain") == "plain" and text_of(None) == ""


def test_the_estimate_counts_cjk_per_character_and_latin_per_four():
    assert estimate_text_tokens("abcdefgh") == 2
    assert estimate_text_tokens("你好世界") == 4
    assert estimate_text_tokens("abcdefgh", chars_per_token=2) == 4
    assert estimate_text_tokens("héllo 你好 wörld") == 2 + 3   # 12 non-CJK characters, 2 CJK
    assert estimate_text_tokens("abcdefghi") == 3 and estimate_text_tokens("") == 0


def test_strict_parts_rejects_malformed_shapes_with_a_400():
    with pytest.raises(InvalidRequest):
        strict_parts({"role": "user", "content": 5}, 0)
    with pytest.raises(InvalidRequest):
        strict_parts({"role": "user", "content": [{"type": "text", "text": 3}]}, 2)
    assert strict_parts({"role": "user", "content": "\ud800x"}, 0).text == "?x"


def test_the_asked_message_is_the_last_user_message():
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}, {"role": "tool", "content": "d"}]
    assert last_user_index(msgs) == 2
    assert last_user_index([{"role": "system", "content": "x"}]) is None
