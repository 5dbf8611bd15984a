"""The gateway's JSON on the wire (orjson) writes and reads what the standard library did."""

from __future__ import annotations

import json

import numpy as np
import pytest
from starlette.responses import JSONResponse

from serve_app import json_wire
from serve_app.api.protocol import ChatCompletionRequest, parse_model
from serve_app.errors import InvalidRequest
from serve_app.messages.chunks import Chunk

ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1764979200, "model": "qwen-72b",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "Grüße, 你好 — \"quoted\"\n"},
                       "logprobs": None, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}}


def test_an_answer_is_written_byte_for_byte_as_starlette_wrote_it():
    assert json_wire.JSONAnswer(ANSWER).body == JSONResponse(ANSWER).body
    assert json_wire.JSONAnswer(ANSWER, status_code=201, headers={"x-a": "1"}).headers["x-a"] == "1"
    assert json_wire.JSONAnswer(ANSWER).headers["content-type"] == "application/json"


def test_floats_and_keys_read_back_as_the_same_values():
    vector = [0.1, -1e-05, 3.4028234663852886e38, 0.0, 1 / 3]
    assert json.loads(json_wire.dumps({"embedding": vector})) == {"embedding": vector}
    assert json.loads(json_wire.dumps(np.array([0.5, 0.25], dtype=np.float32))) == [0.5, 0.25]
    # Keys that are not strings become strings, as json writes them.
    assert json.loads(json_wire.dumps({1: "a", "b": 2})) == {"1": "a", "b": 2}


def test_what_orjson_refuses_is_written_by_json_and_nan_is_null():
    big = 2 ** 70
    assert json.loads(json_wire.dumps({"seed": big})) == {"seed": big}
    assert json_wire.dumps({"x": float("nan")}) == b'{"x":null}'
    with pytest.raises(TypeError):
        json_wire.dumps({"x": object()})


def test_reading_falls_back_to_json_for_what_it_reads_and_refuses_the_rest():
    assert json_wire.loads(b'{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}
    assert json_wire.loads('{"t": NaN}')["t"] != json_wire.loads('{"t": NaN}')["t"]  # NaN, as json reads it
    with pytest.raises(json_wire.JSONDecodeError):
        json_wire.loads(b'{"a": ')


@pytest.mark.parametrize("raw", [b'{"model": "x", "messages": [', b"\xff\xfe{}", b"[1, 2]"])
def test_a_body_that_is_not_a_json_object_is_a_400_invalid_json(raw):
    with pytest.raises(InvalidRequest) as err:
        parse_model(ChatCompletionRequest, raw)
    assert err.value.code == "invalid_json"


@pytest.mark.parametrize("raw", [b'{"model": "m", "messages": [{"role": "user", "content": "bad \\ud800 text"}]}',
                                 b'{"model": "m", "messages": [{"role": "user", "content": "\\udfff"}]}',
                                 b'{"model": "m", "metadata": {"\\ud83d": "a key"}, "messages": []}'])
def test_an_unpaired_surrogate_escape_is_a_400_invalid_json_naming_it(raw):
    # vLLM's tokenizer fails on such a string (a 502 that counted against the model's breaker).
    with pytest.raises(InvalidRequest) as err:
        parse_model(ChatCompletionRequest, raw)
    assert err.value.code == "invalid_json" and "surrogate" in str(err.value)
    # A pair is a character, and NaN still falls back to json.
    assert json_wire.loads(b'{"a": "\\ud83d\\ude00", "t": NaN}')["a"] == "\U0001f600"


def test_a_body_nested_deeper_than_either_parser_goes_is_a_decode_error_not_a_crash():
    # orjson stops at 1,024 levels and json at its recursion limit (a RecursionError, which
    # surfaced as a 500): both end as the JSONDecodeError callers expect.
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000):
        with pytest.raises(json_wire.JSONDecodeError):
            json_wire.loads(raw)
        with pytest.raises(InvalidRequest) as err:
            parse_model(ChatCompletionRequest, raw)
        assert err.value.code == "invalid_json"


def nested(depth: int) -> str:
    """An object ``depth`` levels deep: {"a": {"a": ... 1}}."""
    return '{"a":' * (depth - 1) + '{"a":1' + "}" * depth


def test_nesting_depth_counts_objects_and_arrays():
    assert json_wire.nests_deeper_than(1, 0) is False and json_wire.nests_deeper_than("x", 0) is False
    assert json_wire.nests_deeper_than({}, 1) is False and json_wire.nests_deeper_than({}, 0) is True
    assert json_wire.nests_deeper_than([{"a": [1]}], 3) is False
    assert json_wire.nests_deeper_than([{"a": [1]}], 2) is True
    assert json_wire.nests_deeper_than([[], [[[]]], []], 3) is True     # the deep branch is found anywhere
    deep: object = 1
    for _ in range(5000):                                                # no recursion in the walk
        deep = {"a": deep}
    assert json_wire.nests_deeper_than(deep, 4999) is True and json_wire.nests_deeper_than(deep, 5000) is False


def test_a_body_nested_deeper_than_the_limit_is_a_400_naming_the_setting():
    head = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": '
    with pytest.raises(InvalidRequest) as err:
        parse_model(ChatCompletionRequest, head + nested(64).encode() + b"}", max_depth=64)
    assert err.value.code == "invalid_json" and "global.server.max_json_depth" in str(err.value)
    assert "64 levels" in str(err.value)
    # At the limit (the body is one level, metadata's value 63 more), and brackets in text do not count.
    assert parse_model(ChatCompletionRequest, head + nested(63).encode() + b"}", max_depth=64).model == "m"
    text = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"{[" * 500 + b'"}]}'
    assert parse_model(ChatCompletionRequest, text, max_depth=8).messages[0].content.startswith("{[")
    # No limit given: only the parsers' own.
    assert parse_model(ChatCompletionRequest, head + nested(200).encode() + b"}").model == "m"


def test_a_nan_temperature_is_still_refused_naming_the_parameter():
    with pytest.raises(InvalidRequest) as err:
        parse_model(ChatCompletionRequest, b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], '
                                           b'"temperature": NaN}')
    assert err.value.param == "temperature"


def test_a_chunk_keeps_an_engines_text_and_writes_its_own_data_compactly():
    text = '{"id": "c", "choices": [{"index": 0, "delta": {"content": "é"}}]}'
    kept = Chunk(text=text)
    assert kept.json() == text and kept.data["choices"][0]["delta"]["content"] == "é"
    built = Chunk({"id": "c", "choices": [{"index": 0, "delta": {"content": "é"}}]})
    assert built.json() == '{"id":"c","choices":[{"index":0,"delta":{"content":"é"}}]}'


def test_embedding_rows_are_written_as_float32_and_read_back_exactly():
    from deployments.embedding import EmbeddedInput
    from serve_app.fleet.backends.embedding import embedding_result

    rows = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float16)  # a float16 model's output
    result = embedding_result("bge-m3", 3, EmbeddedInput(rows, [4, 5, 6], 512))
    body = json_wire.JSONAnswer({"data": [{"embedding": v} for v in result.vectors]}).body
    back = np.array([d["embedding"] for d in json.loads(body)["data"]], dtype=np.float32)
    assert np.array_equal(back, rows.astype(np.float32))
    # float32's own shortest digits (0.1, not 0.10000000149011612): what OpenAI answers.
    assert json_wire.dumps(np.array([0.1], dtype=np.float32)) == b"[0.1]"
