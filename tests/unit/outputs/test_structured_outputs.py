"""response_format enforcement: parsing, repair, one corrective retry, errors keeping raw text."""

import json

import pytest

from serve_app.errors import InvalidRequest, UpstreamTimeout
from serve_app.outputs import (StructuredOutputError, contract_from_request, enforce,
                               enforce_detailed, prepare_request)

from outputs_fakes import ScriptedRetry, reply

MESSAGES = [{"role": "system", "content": "You grade answers."},
            {"role": "user", "content": "Grade: Paris is the capital of France."}]
GRADE_SCHEMA = {"type": "object",
                "properties": {"verdict": {"type": "string", "enum": ["correct", "wrong"]},
                               "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
                "required": ["verdict", "confidence"], "additionalProperties": False}


def schema_request(schema=GRADE_SCHEMA, **extra):
    return {"messages": MESSAGES, "response_format": {
        "type": "json_schema", "json_schema": {"name": "grade", "schema": schema, **extra}}}


def object_request():
    return {"messages": MESSAGES, "response_format": {"type": "json_object"}}


def content(response):
    return response["choices"][0]["message"]["content"]


# --------------------------------------------------------------------------- contract at entry


def test_no_or_text_response_format_has_no_contract():
    assert contract_from_request({"messages": MESSAGES}) is None
    assert contract_from_request({"messages": MESSAGES, "response_format": {"type": "text"}}) is None


def test_json_object_and_json_schema_contracts():
    assert contract_from_request(object_request()).kind == "json_object"
    contract = contract_from_request(schema_request(strict=True))
    assert (contract.kind, contract.name, contract.strict) == ("json_schema", "grade", True)
    assert contract.schema == GRADE_SCHEMA


@pytest.mark.parametrize("fmt, param", [
    ("json", "response_format"),
    ({"type": "yaml"}, "response_format.type"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": GRADE_SCHEMA}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "has space", "schema": {}}},
     "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "g", "schema": [1]}},
     "response_format.json_schema.schema"),
    # Not a valid JSON Schema: "type" must be a known type name.
    ({"type": "json_schema", "json_schema": {"name": "g", "schema": {"type": "objekt"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "g", "schema": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}}},
     "response_format.json_schema.schema"),
])
def test_malformed_response_format_is_a_400_naming_the_parameter(fmt, param):
    with pytest.raises(InvalidRequest) as info:
        contract_from_request({"messages": MESSAGES, "response_format": fmt})
    assert info.value.status == 400
    assert info.value.param == param


def test_bad_schema_error_says_where():
    fmt = {"type": "json_schema", "json_schema": {"name": "g", "schema": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}}}
    with pytest.raises(InvalidRequest) as info:
        contract_from_request({"messages": MESSAGES, "response_format": fmt})
    assert "properties/n/minimum" in info.value.message


# --------------------------------------------------------------------------- unconstrained path


@pytest.mark.asyncio
async def test_plain_valid_json_becomes_canonical_text():
    contract = contract_from_request(schema_request())
    result = await enforce_detailed(contract, reply('{\n  "verdict": "correct",\n  "confidence": 0.9\n}'),
                                    None, engine_constrained=False)
    assert result.status == "valid"
    assert content(result.response) == '{"verdict":"correct","confidence":0.9}'


@pytest.mark.asyncio
async def test_fenced_json_is_extracted():
    contract = contract_from_request(object_request())
    fenced = 'Here you go:\n```json\n{"verdict": "correct", "confidence": 1}\n```\nAnything else?'
    result = await enforce_detailed(contract, reply(fenced), None, engine_constrained=False)
    assert result.status == "repaired"
    assert json.loads(content(result.response)) == {"verdict": "correct", "confidence": 1}


@pytest.mark.asyncio
@pytest.mark.parametrize("broken, expected", [
    ('{"verdict": "correct", "confidence": 0.5,}', {"verdict": "correct", "confidence": 0.5}),
    ("{'verdict': 'wrong', 'confidence': 0.25}", {"verdict": "wrong", "confidence": 0.25}),
    ('{verdict: "correct", confidence: 1}', {"verdict": "correct", "confidence": 1}),
])
async def test_broken_json_is_repaired_and_validated(broken, expected):
    contract = contract_from_request(schema_request())
    retry = ScriptedRetry()
    out = await enforce(contract, reply(broken), retry, engine_constrained=False)
    assert json.loads(content(out)) == expected
    assert retry.requests == []  # repaired without spending a retry


@pytest.mark.asyncio
async def test_array_schema_extracts_an_array():
    contract = contract_from_request(schema_request({"type": "array", "items": {"type": "integer"}}))
    out = await enforce(contract, reply("The numbers are [1, 2, 3,] as asked."), None,
                        engine_constrained=False)
    assert content(out) == "[1,2,3]"


@pytest.mark.asyncio
async def test_schema_invalid_answer_fixed_by_the_one_retry():
    contract = contract_from_request(schema_request())
    bad = reply('{"verdict": "correct"}', usage={"prompt_tokens": 10, "completion_tokens": 5,
                                                 "total_tokens": 15})
    good = reply('{"verdict": "correct", "confidence": 0.8}', model="fake-2",
                 usage={"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37})
    retry = ScriptedRetry(good)
    result = await enforce_detailed(contract, bad, retry, engine_constrained=False)

    assert result.status == "retried"
    assert json.loads(content(result.response)) == {"verdict": "correct", "confidence": 0.8}
    assert result.response["model"] == "fake-2"
    # Both calls were spent on this answer.
    assert result.response["usage"] == {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}
    # The corrective turn: original conversation, the rejected answer, the named problem.
    [follow_up] = retry.requests
    assert follow_up["messages"][:2] == MESSAGES
    assert follow_up["messages"][2] == {"role": "assistant", "content": '{"verdict": "correct"}'}
    instruction = follow_up["messages"][3]
    assert instruction["role"] == "user"
    assert "'confidence' is a required property" in instruction["content"]
    assert follow_up["response_format"] == schema_request()["response_format"]


@pytest.mark.asyncio
async def test_retry_continues_the_request_the_model_actually_received():
    contract = contract_from_request(schema_request())
    sent = {**schema_request(), "messages": [*MESSAGES[:1], {"role": "user", "content": "older turn"},
                                             *MESSAGES[1:]], "temperature": 0}
    retry = ScriptedRetry(reply('{"verdict": "wrong", "confidence": 0}'))
    await enforce(contract, reply("no idea"), retry, engine_constrained=False, request=sent)
    assert retry.requests[0]["messages"][:3] == sent["messages"]
    assert retry.requests[0]["temperature"] == 0


@pytest.mark.asyncio
async def test_still_invalid_after_retry_is_an_error_keeping_raw_text():
    contract = contract_from_request(schema_request())
    retry = ScriptedRetry(reply('{"verdict": "maybe", "confidence": 2}'))
    with pytest.raises(StructuredOutputError) as info:
        await enforce(contract, reply("I think it is correct."), retry, engine_constrained=False)
    err = info.value
    assert (err.status, err.code, err.type) == (502, "invalid_structured_output", "upstream_error")
    assert err.details["raw"] == '{"verdict": "maybe", "confidence": 2}'
    assert [a["raw"] for a in err.details["attempts"]] == [
        "I think it is correct.", '{"verdict": "maybe", "confidence": 2}']
    assert "not valid JSON" in err.details["attempts"][0]["error"]
    assert "schema violation" in err.details["attempts"][1]["error"]
    # The OpenAI error body carries the trace (the ingress renders body()).
    assert err.body()["error"]["details"]["raw"] == '{"verdict": "maybe", "confidence": 2}'


@pytest.mark.asyncio
async def test_a_degenerate_deeply_nested_answer_is_invalid_not_a_crash():
    # A model that loops on "[" or '{"a":' past json's recursion limit: a RecursionError, once.
    contract = contract_from_request(object_request())
    for text in ("[" * 5000, '{"a":' * 5000 + "1" + "}" * 5000):
        with pytest.raises(StructuredOutputError) as info:
            await enforce(contract, reply(text), None, engine_constrained=False)
        assert "nested too deep" in info.value.details["attempts"][0]["error"]


@pytest.mark.asyncio
async def test_without_retry_an_invalid_answer_fails_at_once():
    contract = contract_from_request(object_request())
    with pytest.raises(StructuredOutputError) as info:
        await enforce(contract, reply("no JSON here"), None, engine_constrained=False)
    assert info.value.details["raw"] == "no JSON here"
    assert len(info.value.details["attempts"]) == 1


@pytest.mark.asyncio
async def test_empty_answer_is_not_success():
    contract = contract_from_request(object_request())
    with pytest.raises(StructuredOutputError, match="empty"):
        await enforce(contract, reply(""), ScriptedRetry(reply(None)), engine_constrained=False)


@pytest.mark.asyncio
async def test_json_object_rejects_a_non_object():
    contract = contract_from_request(object_request())
    with pytest.raises(StructuredOutputError, match="expected a JSON object"):
        await enforce(contract, reply("[1, 2]"), None, engine_constrained=False)


@pytest.mark.asyncio
async def test_failed_retry_call_becomes_structured_error_with_both_facts():
    contract = contract_from_request(object_request())
    retry = ScriptedRetry(UpstreamTimeout("model 'k2' timed out"))
    with pytest.raises(StructuredOutputError) as info:
        await enforce(contract, reply("nope"), retry, engine_constrained=False)
    assert info.value.details["raw"] == "nope"
    assert info.value.details["retry_error"]["code"] == "timeout"


@pytest.mark.asyncio
async def test_truncated_answer_retry_asks_for_a_shorter_answer():
    contract = contract_from_request(schema_request())
    retry = ScriptedRetry(reply('{"verdict": "wrong", "confidence": 0.1}'))
    await enforce(contract, reply('{"verdict": "wr', finish="length"), retry, engine_constrained=False)
    assert "token limit" in retry.requests[0]["messages"][-1]["content"]


@pytest.mark.asyncio
async def test_answer_still_cut_at_the_token_limit_comes_back_as_the_engine_gave_it():
    # The limit is the client's: OpenAI returns such an answer with finish_reason "length"
    # (the SDK's parse() raises LengthFinishReasonError on it); a 502 would be retried by clients.
    contract = contract_from_request(schema_request())
    cut_again = reply('{"verdict": "wrong", "conf', finish="length",
                      usage={"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28})
    retry = ScriptedRetry(cut_again)
    first = reply('{"verdict": "wr', finish="length",
                  usage={"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18})
    result = await enforce_detailed(contract, first, retry, engine_constrained=True)
    assert result.status == "truncated"
    assert content(result.response) == '{"verdict": "wrong", "conf'
    assert result.response["choices"][0]["finish_reason"] == "length"
    assert result.response["usage"]["total_tokens"] == 46  # both attempts were paid for
    assert [a.finish_reason for a in result.attempts] == ["length", "length"]
    assert content(cut_again) == '{"verdict": "wrong", "conf'  # the retry's answer is not mutated


@pytest.mark.asyncio
async def test_answer_cut_at_the_token_limit_without_a_retry_is_returned_truncated():
    contract = contract_from_request(object_request())
    first = reply('{"a": [1, 2', finish="length")
    # (Unconstrained, the repair would close the brackets: test_structured_on_simulated_engine.)
    result = await enforce_detailed(contract, first, None, engine_constrained=True)
    assert (result.status, content(result.response)) == ("truncated", '{"a": [1, 2')


@pytest.mark.asyncio
async def test_retry_that_fails_for_another_reason_after_a_cut_answer_is_still_an_error():
    contract = contract_from_request(schema_request())
    retry = ScriptedRetry(reply('{"verdict": "maybe", "confidence": 0.5}'))
    with pytest.raises(StructuredOutputError) as info:
        await enforce(contract, reply('{"verdict": "wr', finish="length"), retry,
                      engine_constrained=True)
    assert [a["finish_reason"] for a in info.value.details["attempts"]] == ["length", "stop"]


@pytest.mark.asyncio
async def test_one_truncated_choice_marks_the_whole_answer_truncated():
    contract = contract_from_request(object_request())
    response = reply('{"a": 1}')
    response["choices"].append({"index": 1, "message": {"role": "assistant", "content": '{"a": '},
                                "finish_reason": "length"})
    result = await enforce_detailed(contract, response, ScriptedRetry(reply('{"a": ', finish="length")),
                                    engine_constrained=True)
    assert result.status == "truncated"
    assert [c["finish_reason"] for c in result.response["choices"]] == ["stop", "length"]
    assert [c["message"]["content"] for c in result.response["choices"]] == ['{"a":1}', '{"a": ']


@pytest.mark.asyncio
async def test_tool_call_answers_are_left_alone():
    contract = contract_from_request(object_request())
    call = [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]
    response = reply(None, finish="tool_calls", tool_calls=call)
    result = await enforce_detailed(contract, response, None, engine_constrained=False)
    assert result.status == "tool_calls"
    assert result.response is response


@pytest.mark.asyncio
async def test_input_response_is_not_mutated():
    contract = contract_from_request(object_request())
    original = reply('```json\n{"a": 1}\n```')
    await enforce(contract, original, None, engine_constrained=False)
    assert content(original) == '```json\n{"a": 1}\n```'


# --------------------------------------------------------------------------- constrained path


@pytest.mark.asyncio
async def test_engine_constrained_valid_output_passes_without_retry():
    contract = contract_from_request(schema_request())
    retry = ScriptedRetry()
    out = await enforce(contract, reply('{"verdict": "correct", "confidence": 1.0}'), retry,
                        engine_constrained=True)
    assert json.loads(content(out)) == {"verdict": "correct", "confidence": 1.0}
    assert retry.requests == []


@pytest.mark.asyncio
async def test_engine_constrained_output_is_never_repaired():
    contract = contract_from_request(object_request())
    # Repairable text, but a grammar-decoded answer that does not parse is not guessed at.
    with pytest.raises(StructuredOutputError) as info:
        await enforce(contract, reply('{"a": 1,}'), None, engine_constrained=True)
    assert info.value.details["raw"] == '{"a": 1,}'


@pytest.mark.asyncio
async def test_engine_constrained_schema_violation_still_validated_and_retried():
    # Grammar backends skip some keywords (here: maximum); validation catches it.
    contract = contract_from_request(schema_request())
    retry = ScriptedRetry(reply('{"verdict": "correct", "confidence": 0.7}'))
    out = await enforce(contract, reply('{"verdict": "correct", "confidence": 7}'), retry,
                        engine_constrained=True)
    assert json.loads(content(out))["confidence"] == 0.7
    assert "confidence" in retry.requests[0]["messages"][-1]["content"]


# --------------------------------------------------------------------------- request preparation


def test_unconstrained_request_carries_the_requirement_in_the_prompt():
    request = schema_request()
    contract = contract_from_request(request)
    body = prepare_request(contract, request, engine_constrained=False)
    assert "response_format" not in body
    system = body["messages"][0]["content"]
    assert system.startswith("You grade answers.")
    assert '"required":["verdict","confidence"]' in system
    assert body["messages"][1:] == MESSAGES[1:]
    assert request["messages"][0]["content"] == "You grade answers."  # caller's copy intact


def test_constrained_request_keeps_response_format_for_the_engine():
    request = object_request()
    contract = contract_from_request(request)
    assert prepare_request(contract, request, engine_constrained=True) is request
    assert prepare_request(None, {"messages": MESSAGES}, engine_constrained=False) == {"messages": MESSAGES}


# --------------------------------------------------------------------------- n > 1

@pytest.mark.asyncio
async def test_every_choice_is_checked_and_a_bad_one_is_retried_alone():
    good = json.dumps({"verdict": "correct", "confidence": 0.9})
    answer = reply(good, usage={"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30})
    answer["choices"].append({"index": 1, "message": {"role": "assistant", "content": "not json"},
                              "finish_reason": "stop"})
    retry = ScriptedRetry(reply(json.dumps({"verdict": "wrong", "confidence": 0.2}),
                                usage={"prompt_tokens": 15, "completion_tokens": 5, "total_tokens": 20}))
    request = {**schema_request(), "n": 2}
    result = await enforce_detailed(contract_from_request(request), answer, retry,
                                    engine_constrained=True, request=request)
    assert result.status == "retried"
    assert [json.loads(c["message"]["content"])["verdict"] for c in result.response["choices"]] == ["correct", "wrong"]
    assert [c["index"] for c in result.response["choices"]] == [0, 1]
    assert len(retry.requests) == 1 and "n" not in retry.requests[0]   # one choice asked again
    assert result.response["usage"]["total_tokens"] == 50
