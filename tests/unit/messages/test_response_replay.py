"""SSE replay of a finished Fusion answer: content, tool-call deltas, usage chunk."""

import json

import pytest
from openai.types.chat import ChatCompletionChunk

from serve_app.messages.chunks import response_to_chunks, split_text

from fakes.responses import completion, tool_call

TEXT = ("Paris is the capital of France. " * 12).strip()


def fused(message_kw=None, **extra):
    body = completion(TEXT, model="vllm-sr/fusion", prompt_tokens=50, completion_tokens=25,
                      **(message_kw or {}))
    body.update(extra)
    return body


def test_split_text_is_lossless_and_cuts_at_whitespace():
    pieces = split_text(TEXT, 40)
    assert "".join(pieces) == TEXT and len(pieces) > 1
    assert all(len(p) <= 40 for p in pieces)
    assert all(p.endswith(" ") for p in pieces[:-1])
    assert split_text("x" * 100, 30) == ["x" * 30, "x" * 30, "x" * 30, "x" * 10]
    assert split_text("") == []


def test_content_chunks_replay_the_answer_and_validate_as_openai_chunks():
    chunks = response_to_chunks(fused(), include_usage=False, piece_chars=40)
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert parsed[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parsed) == TEXT
    assert [p.choices[0].finish_reason for p in parsed][-1] == "stop"
    assert all(p.choices[0].finish_reason is None for p in parsed[:-1])
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "vllm-sr/fusion" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert all("usage" not in c for c in chunks)


def test_usage_chunk_comes_last_when_requested():
    chunks = response_to_chunks(fused(), include_usage=True)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 75
    assert all(c["usage"] is None for c in chunks[:-1])
    ChatCompletionChunk.model_validate(chunks[-1])


def test_tool_call_deltas_end_with_finish_reason_tool_calls():
    calls = [tool_call("web_search", {"query": "a" * 150}, "call_1"),
             tool_call("get_time", {"tz": "UTC"}, "call_2")]
    body = completion(None, tool_calls=calls)
    chunks = response_to_chunks(body, include_usage=False, piece_chars=32)
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert parsed[-1].choices[0].finish_reason == "tool_calls"
    rebuilt: dict[int, dict] = {}
    for p in parsed:
        for delta in p.choices[0].delta.tool_calls or []:
            entry = rebuilt.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            entry["id"] = delta.id or entry["id"]
            if delta.function and delta.function.name:
                entry["name"] = delta.function.name
            entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert [(e["id"], e["name"]) for e in rebuilt.values()] == [("call_1", "web_search"), ("call_2", "get_time")]
    assert json.loads(rebuilt[0]["arguments"]) == {"query": "a" * 150}
    assert not any(p.choices[0].delta.content for p in parsed)


def test_reasoning_and_trace_are_carried():
    body = fused({"reasoning": "thought"}, fusion={"decision": "panel"})
    chunks = response_to_chunks(body, include_usage=False)
    assert chunks[1]["choices"][0]["delta"] == {"reasoning_content": "thought"}
    assert chunks[-1]["fusion"] == {"decision": "panel"}


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_finish_reason_of_text_answers_is_kept(finish):
    body = completion("x", finish_reason=finish)
    assert response_to_chunks(body, include_usage=False)[-1]["choices"][0]["finish_reason"] == finish


def test_an_engine_chunk_is_kept_as_text_until_someone_looks_inside():
    from serve_app.messages.chunks import Chunk

    text = '{"id":"c1","object":"chat.completion.chunk","model":"k2","choices":[{"index":0,"delta":{"content":"hi"}}]}'
    chunk = Chunk(text=text)
    assert chunk.json() is text and not chunk.parsed          # written back as it came
    assert not chunk.is_error and not chunk.is_usage_only and not chunk.parsed
    assert chunk.data["choices"][0]["delta"]["content"] == "hi" and chunk.parsed
    usage = Chunk(text='{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3}}')
    assert usage.is_usage_only and usage.carries_usage()
    assert Chunk(text='{"error":{"message":"x"}}').is_error
    assert json.loads(Chunk({"a": 1}).json()) == {"a": 1}
