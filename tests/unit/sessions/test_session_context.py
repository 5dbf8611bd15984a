"""Merging stored history with a request's messages, trimming, and session ids."""

from __future__ import annotations

import pytest

from serve_app.config.access import SessionSettings
from serve_app.errors import ContextLengthExceeded, InvalidRequest
from serve_app.messages.view import estimate_tokens
from serve_app.sessions.context import (history_budget, merge_history, new_turn_messages, storable,
                                        trim_to_context)
from serve_app.sessions.ids import session_id_from_headers


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "You are terse."}
H = [u("q1"), a("a1"), u("q2"), a("a2")]


# --------------------------------------------------------------------------- merge_history


def test_session_reliant_client_gets_history_in_front():
    assert merge_history(H, [SYSTEM, u("q3")]) == [SYSTEM, *H, u("q3")]


def test_full_resend_is_not_duplicated():
    assert merge_history(H, [SYSTEM, *H, u("q3")]) == [SYSTEM, *H, u("q3")]


def test_window_resend_keeps_older_history_once():
    # The client resends only its last exchange.
    assert merge_history(H, [u("q2"), a("a2"), u("q3")]) == [*H, u("q3")]


def test_request_holding_more_than_trimmed_store_is_authoritative():
    # The store dropped q1/a1 (max_messages) but the client still sends them.
    stored = [u("q2"), a("a2")]
    request = [*H, u("q3")]
    assert merge_history(stored, request) == request


def test_edited_earlier_message_replaces_the_stored_one():
    request = [u("q1"), a("a1 (edited)"), u("q2"), a("a2"), u("q3")]
    assert merge_history(H, request) == request


def test_repeated_short_message_is_a_new_message_not_a_resend():
    stored = [u("continue"), a("part 1")]
    assert merge_history(stored, [u("continue")]) == [*stored, u("continue")]


def test_one_part_text_list_equals_plain_string():
    resent = [{"role": "user", "content": [{"type": "text", "text": "q1"}]}, a("a1"),
              u("q2"), a("a2"), u("q3")]
    merged = merge_history(H, resent)
    assert len(merged) == 5 and merged[-1] == u("q3")


def test_request_system_prompt_wins_over_stored_one():
    stored = [{"role": "system", "content": "old"}, *H]
    assert merge_history(stored, [SYSTEM, u("q3")]) == [SYSTEM, *H, u("q3")]


def test_tool_call_exchange_aligns():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "get_time", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "12:00"}
    stored = [u("time?"), call]
    request = [u("time?"), call, result]
    assert merge_history(stored, request) == request


def test_empty_history_passes_request_through():
    assert merge_history([], [SYSTEM, u("hi")]) == [SYSTEM, u("hi")]


# --------------------------------------------------------------------------- new_turn_messages


def test_new_turn_is_unstored_request_messages_plus_answer_without_system():
    answer = {"role": "assistant", "content": "a3", "reasoning_content": "hmm", "refusal": None}
    assert new_turn_messages(H, [SYSTEM, *H, u("q3")], answer) == [u("q3"), a("a3")]
    assert new_turn_messages(H, [SYSTEM, u("q3")], answer) == [u("q3"), a("a3")]
    assert new_turn_messages([], [SYSTEM, u("q1")], a("a1")) == [u("q1"), a("a1")]


def test_storable_keeps_tool_calls_and_drops_decoration():
    msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}], "refusal": None}
    assert storable(msg) == {"role": "assistant", "tool_calls": [{"id": "x"}]}


# --------------------------------------------------------------------------- trimming


def per_message(messages):
    # Each message costs its content length: easy arithmetic for trimming tests.
    return sum(len(m.get("content") or "") for m in messages)


def test_trim_drops_oldest_turns_and_keeps_system_prompt():
    sys_msg = {"role": "system", "content": "S" * 10}
    turns = [u("x" * 10), a("y" * 10), u("p" * 10), a("q" * 10), u("z" * 10)]
    trimmed = trim_to_context([sys_msg, *turns], 40, estimate=per_message)
    assert trimmed == [sys_msg, u("p" * 10), a("q" * 10), u("z" * 10)]


def test_trim_returns_everything_when_it_fits():
    messages = [SYSTEM, *H, u("q3")]
    assert trim_to_context(messages, 10_000) == messages


def test_trim_never_orphans_a_tool_result():
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "r" * 50}
    messages = [u("old" * 10), call, result, a("done"), u("new")]
    trimmed = trim_to_context(messages, 10, estimate=per_message)
    assert trimmed == [u("new")]
    assert all(m.get("role") != "tool" for m in trimmed)


def test_trim_raises_context_length_exceeded_when_latest_turn_cannot_fit():
    with pytest.raises(ContextLengthExceeded) as err:
        trim_to_context([SYSTEM, u("x" * 100)], 50, estimate=per_message)
    assert err.value.status == 400 and err.value.code == "context_length_exceeded"


def test_estimate_counts_cjk_per_character_and_images_flat():
    latin = estimate_tokens([u("a" * 400)])
    cjk = estimate_tokens([u("中" * 400)])
    image = estimate_tokens([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    assert 100 <= latin < 120
    assert cjk >= 400
    assert image > 500


def test_history_budget_reserves_room_for_the_answer():
    assert history_budget(8192, None, 1024) == 7168
    assert history_budget(8192, 4096, 1024) == 4096
    assert history_budget(1000, 5000, 1024) == 0


# --------------------------------------------------------------------------- session ids


def test_session_id_header_is_case_insensitive_and_optional():
    settings = SessionSettings()
    assert session_id_from_headers({"x-session-id": "abc-123"}, settings) == "abc-123"
    assert session_id_from_headers({}, settings) is None
    assert session_id_from_headers({"X-Session-ID": "abc"}, SessionSettings(enabled=False)) is None


@pytest.mark.parametrize("bad", ["has space", "a\"quote", "x" * 200, "-leading", "ключ"])
def test_malformed_session_id_is_a_400(bad):
    with pytest.raises(InvalidRequest) as err:
        session_id_from_headers({"X-Session-ID": bad}, SessionSettings())
    assert err.value.status == 400 and err.value.param == "X-Session-ID"
