"""The load generator's time to first token starts at the first event with generated output:
the role-only opening event (``"content": ""``) that the simulated engine and vLLM send first
is not a token (the gateway holds it back until the first token, a bare ingress sends it at once,
so counting it made the bare baseline look one streamed chunk faster)."""

import json

from loadtests.lib.httpload import carries_token


def event(delta=None, **choice) -> bytes:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, **({"delta": delta} if delta is not None else {}), **choice}]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n"


def test_the_role_only_opening_event_is_not_a_token():
    assert not carries_token(event({"role": "assistant", "content": ""}))
    assert not carries_token(event({"role": "assistant"}))


def test_text_reasoning_and_tool_calls_are_tokens():
    assert carries_token(event({"content": "Hel"}))
    assert carries_token(event({"reasoning_content": "Let me"}))
    assert carries_token(event({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}))
    assert carries_token(event(text="Once"))  # a text completion's chunk


def test_usage_done_comments_and_errors_are_not_tokens():
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n'
    assert not carries_token(usage)
    assert not carries_token(b"data: [DONE]\n")
    assert not carries_token(b": keep-alive\n")
    assert not carries_token(b'data: {"error":{"message":"x","type":"server_error"}}\n')
    assert not carries_token(b"\n")
