"""``POST /v1/responses`` in process over the shared fake fleet, read by the official ``openai``
client (its typed ``Response``, its raw event stream and its strict stream accumulator,
``responses.stream``): the request becomes the chat request it stands for (what the model
receives is asserted), the answer comes back in Responses' shape, and what needs state the
gateway does not keep is a 400 naming the parameter before any model is called. Stored
responses: test_stored_responses_http.py."""

from __future__ import annotations

import json

import openai
import pytest

from fakes.fleet import FakeModel
from fakes.gateway import running_gateway
from fakes.responses import completion, tool_call
from fakes.responses_api import WEATHER, sdk

AUTO = "vllm-sr/auto"


def test_text_input_and_instructions_become_a_chat_request_and_the_answer_a_response(tmp_path):
    qwen = FakeModel("qwen-72b", completion("Paris is the capital.", model="qwen-72b",
                                            prompt_tokens=21, completion_tokens=6))
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        r = sdk(client).responses.create(model="qwen-72b", input="What is the capital of France?",
                                         instructions="Answer in one sentence.", max_output_tokens=40,
                                         temperature=0.2, metadata={"ticket": "7"})
    assert qwen.calls[-1]["messages"] == [{"role": "system", "content": "Answer in one sentence."},
                                          {"role": "user", "content": "What is the capital of France?"}]
    assert qwen.calls[-1]["max_completion_tokens"] == 40 and qwen.calls[-1]["temperature"] == 0.2
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.output_text == "Paris is the capital." and r.model == "qwen-72b"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (21, 6, 27)
    assert r.metadata == {"ticket": "7"} and r.store is True and r.instructions == "Answer in one sentence."


def test_items_with_a_function_call_and_its_output_become_chat_turns(tmp_path):
    qwen = FakeModel("qwen-72b", completion("It is sunny in Paris.", model="qwen-72b"))
    items = [{"role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
             {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": '{"city":"Paris"}'},
             {"type": "function_call_output", "call_id": "call_9", "output": "sunny, 21 C"},
             {"type": "reasoning", "id": "rs_1", "summary": []}]
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        r = sdk(client).responses.create(model="qwen-72b", input=items, tools=[WEATHER])
    sent = qwen.calls[-1]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {"role": "assistant", "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny, 21 C"}]
    assert sent["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}]
    assert r.output_text == "It is sunny in Paris."


def test_a_tool_call_answer_is_a_function_call_item(tmp_path):
    qwen = FakeModel("qwen-72b", completion(None, model="qwen-72b", finish_reason="tool_calls",
                                            tool_calls=[tool_call("get_weather", {"city": "Oslo"}, "call_3")]))
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        r = sdk(client).responses.create(model="qwen-72b", input="weather in Oslo?", tools=[WEATHER],
                                         tool_choice={"type": "function", "name": "get_weather"})
    assert qwen.calls[-1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    [call] = r.output
    assert (call.type, call.call_id, call.name, json.loads(call.arguments)) == (
        "function_call", "call_3", "get_weather", {"city": "Oslo"})
    assert r.status == "completed"


def test_json_schema_format_and_the_token_limit(tmp_path):
    qwen = FakeModel("qwen-72b", completion('{"name": "Ada', model="qwen-72b", finish_reason="length"))
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        r = sdk(client).responses.create(model="qwen-72b", input="a name", max_output_tokens=5,
                                         text={"format": {"type": "json_schema", "name": "person", "schema": schema}})
    assert qwen.calls[-1]["response_format"] == {"type": "json_schema",
                                                 "json_schema": {"name": "person", "schema": schema}}
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_an_auto_slug_routes_and_the_headers_say_where(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        raw = sdk(client).responses.with_raw_response.create(model=AUTO, input="fix the bug in my python code")
    assert raw.headers["x-vsr-selected-model"] == "coder" and fleet.calls()["coder"] == 1
    assert raw.parse().output_text == "hello"


def test_the_event_stream_satisfies_the_clients_accumulator(tmp_path):
    qwen = FakeModel("qwen-72b", tokens=4)
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        with sdk(client).responses.stream(model="qwen-72b", input="count") as stream:
            types = [event.type for event in stream]
            final = stream.get_final_response()
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types.count("response.output_text.delta") == 4
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert final.output_text == "t0 t1 t2 t3 " and final.status == "completed"
    assert qwen.closed_streams == 1      # the model streamed: no buffered answer replayed


def test_a_streamed_fusion_answer_and_its_trace(tmp_path):
    plugin = [{"id": "fusion", "analysis_models": ["qwen-72b", "coder"], "model": "k2"}]
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        raw = sdk(client).responses.with_raw_response.create(model="vllm-sr/fusion", input="compare two sorts",
                                                             extra_body={"plugins": plugin})
        with sdk(client).responses.stream(model="vllm-sr/fusion", input="compare two sorts",
                                          extra_body={"plugins": plugin}) as stream:
            final = stream.get_final_response()
    r = raw.parse()
    assert raw.headers["x-vsr-fusion-panel"] == "qwen-72b,coder" and raw.headers["x-vsr-fusion-judge"] == "k2"
    assert r.output_text == "hello" and r.model_extra["fusion"]["usable_responses"] == 2
    assert final.output_text == "hello" and final.status == "completed"
    assert fleet.calls()["qwen-72b"] == 2 and fleet.calls()["coder"] == 2 and fleet.calls()["k2"] == 4


def test_a_failure_after_the_stream_started_is_an_error_then_response_failed(tmp_path):
    qwen = FakeModel("qwen-72b", tokens=4, fail_after_chunks=2)
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        events = list(sdk(client).responses.create(model="qwen-72b", input="count", stream=True))
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-1].response.status == "failed" and "broke mid-stream" in events[-2].message
    assert [e.sequence_number for e in events] == list(range(len(events)))


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),   # never stored
    ({"previous_response_id": "r" * 257}, "previous_response_id"),
    ({"conversation": {"name": "conv_1"}}, "conversation"),
    ({"conversation": "conv_1", "previous_response_id": "resp_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": []}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    # A format that is not an object was an AttributeError: a 500 (found by mutating every field).
    ({"text": {"format": "json_object"}}, "text.format"),
    ({"text": {"format": ["json_schema"]}}, "text.format"),
    ({"max_output_tokens": True}, "max_output_tokens"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
    # metadata is stored with the response: OpenAI's bounds, as on a conversation
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k" * 65: "v"}}, "metadata." + "k" * 65),
    ({"metadata": {"note": "v" * 513}}, "metadata.note"),
])
def test_what_needs_stored_state_or_is_malformed_is_a_400_naming_the_parameter(gw_client, extra, param):
    client, fleet = gw_client
    r = client.post("/v1/responses", json={"model": "qwen-72b", "input": "hi", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    assert sum(fleet.calls().values()) == 0


def test_clients_default_fields_are_accepted_and_vllm_sampling_passes_through(tmp_path):
    qwen = FakeModel("qwen-72b")
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        r = client.post("/v1/responses", json={
            "model": "qwen-72b", "input": "hi", "store": True, "include": [], "truncation": "disabled",
            "reasoning": {"effort": "low"}, "seed": 7, "top_k": 5})
    assert r.status_code == 200, r.text
    assert r.json()["store"] is True
    sent = qwen.calls[-1]
    assert sent["seed"] == 7 and sent["top_k"] == 5
    assert not {"store", "include", "truncation", "reasoning", "input"} & set(sent)


def test_an_empty_tool_list_is_no_tools(tmp_path):
    # tools: [] is the Responses API's default (the Agents SDK sends it for an agent without
    # tools); vLLM refuses an empty list and a tool_choice without tools, so neither is sent.
    qwen = FakeModel("qwen-72b")
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        r = client.post("/v1/responses", json={"model": "qwen-72b", "input": "hi", "tools": [], "tool_choice": "auto"})
        required = client.post("/v1/responses", json={"model": "qwen-72b", "input": "hi", "tools": [],
                                                       "tool_choice": "required"})
    assert r.status_code == 200, r.text
    assert not {"tools", "tool_choice"} & set(qwen.calls[0])
    # A choice that needs a tool, with none to choose from, is the client's error.
    assert required.status_code == 400 and required.json()["error"]["param"] == "tool_choice"
    assert len(qwen.calls) == 1


@pytest.fixture
def gw_client(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        yield client, fleet


def test_reasoning_then_tool_calls_stream_as_items_the_clients_accumulator_takes():
    # The fake fleet streams text only; a real engine streams reasoning and tool-call deltas,
    # in OpenAI's chunk shape, which the translator must turn into items opened and closed in order.
    from openai._models import construct_type
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    from serve_app.api.responses import ResponseEvents, ResponsesRequest
    from serve_app.messages.chunks import Chunk

    def delta(**fields):
        return Chunk({"choices": [{"index": 0, "delta": fields, "finish_reason": None}]})

    chunks = [delta(role="assistant"), delta(reasoning_content="think "), delta(reasoning_content="more"),
              delta(tool_calls=[{"index": 0, "id": "call_a", "type": "function",
                                 "function": {"name": "get_weather", "arguments": ""}}]),
              delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city":'}}]),
              delta(tool_calls=[{"index": 0, "function": {"arguments": '"Oslo"}'}}]),
              delta(tool_calls=[{"index": 1, "id": "call_b", "type": "function",
                                 "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}]),
              Chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
              Chunk({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}})]
    events = ResponseEvents(ResponsesRequest(model="qwen-72b", input="weather?", tools=[WEATHER]), "qwen-72b")
    raw = events.start() + [e for c in chunks for e in events.feed(c)] + events.finish() + [events.end()]
    payloads = [json.loads(block.split(b"data: ", 1)[1]) for block in raw]
    assert all(block.startswith(f"event: {p['type']}\n".encode()) for block, p in zip(raw, payloads))
    state = ResponseStreamState(input_tools=[WEATHER], text_format=openai.omit)
    for payload in payloads:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=payload))
    final = payloads[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "function_call", "function_call"]
    assert final["output"][0]["content"][0]["text"] == "think more"
    assert [(i["call_id"], json.loads(i["arguments"])) for i in final["output"][1:]] == [
        ("call_a", {"city": "Oslo"}), ("call_b", {"city": "Rome"})]
    assert final["status"] == "completed" and final["usage"]["total_tokens"] == 21
    done = [p["type"] for p in payloads if p["type"].endswith(".done")]
    assert done == ["response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                    "response.function_call_arguments.done", "response.output_item.done",
                    "response.function_call_arguments.done", "response.output_item.done"]


@pytest.mark.parametrize("deltas, parts", [
    ([{"content": "no"}, {"refusal": "n"}, {"refusal": "o"}], [("output_text", "no"), ("refusal", "no")]),
    ([{"refusal": "can't help"}], [("refusal", "can't help")])])
def test_a_streamed_refusal_is_its_own_content_part(deltas, parts):
    # OpenAI's chunks carry a refusal in delta.refusal: the message gets a refusal part, with
    # its own added / delta / done events at its content index.
    from openai._models import construct_type
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    from serve_app.api.responses import ResponseEvents, ResponsesRequest
    from serve_app.messages.chunks import Chunk

    chunks = [Chunk({"choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas]
    events = ResponseEvents(ResponsesRequest(model="qwen-72b", input="?"), "qwen-72b")
    raw = events.start() + [e for c in chunks for e in events.feed(c)] + events.finish() + [events.end()]
    payloads = [json.loads(block.split(b"data: ", 1)[1]) for block in raw]
    state = ResponseStreamState(input_tools=openai.omit, text_format=openai.omit)
    for payload in payloads:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=payload))
    [message] = payloads[-1]["response"]["output"]
    assert [(p["type"], p.get("text", p.get("refusal"))) for p in message["content"]] == parts
    added = [p["content_index"] for p in payloads if p["type"] == "response.content_part.added"]
    assert added == list(range(len(parts)))
    refusal_at = len(parts) - 1
    assert [p["content_index"] for p in payloads if p["type"] == "response.refusal.delta"] == [refusal_at] * (
        len(deltas) - (len(parts) - 1))
    [done] = [p for p in payloads if p["type"] == "response.refusal.done"]
    assert (done["content_index"], done["refusal"]) == (refusal_at, parts[-1][1])


def test_an_assistant_turn_with_text_and_two_calls_is_one_chat_message():
    from serve_app.api.responses import ResponsesRequest, input_messages

    req = ResponsesRequest(model="k2", instructions="be brief", input=[
        {"role": "user", "content": "weather in Oslo and Rome?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call", "call_id": "b", "name": "get_weather", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "cold"}]},
        {"type": "function_call_output", "call_id": "b", "output": "warm"}])
    messages, origins = input_messages(req)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[2]["content"] == "Checking."   # an assistant's text parts: one string, as templates take it
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["a", "b"]
    assert [m.get("content") for m in messages[3:]] == ["cold", "warm"]
    assert origins == ["instructions", "input[0]", "input[1]", "input[4]", "input[5]"]


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{**WEATHER, "name": "bad name!"}]}, "tools[0].name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ({"max_output_tokens": 10**7}, "max_output_tokens"),
    ({"input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]}, "input[1].content[0].image_url"),
])
def test_the_chat_paths_errors_name_the_responses_parameter(gw_client, extra, param):
    client, fleet = gw_client
    r = client.post("/v1/responses", json={"model": "qwen-72b", "input": "hi", **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and "function." not in error["message"] and "max_tokens" not in error["message"]
    assert sum(fleet.calls().values()) == 0


def test_a_session_header_carries_history_across_responses_and_streams(tmp_path):
    # Sessions work here as on chat: X-Session-ID and only the new input.
    qwen = FakeModel("qwen-72b", tokens=2)
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        api.responses.create(model="qwen-72b", input="hello friend, my name is Ada",
                             extra_headers={"X-Session-ID": "s1"})
        with api.responses.stream(model="qwen-72b", input="what is my name, friend?",
                                  extra_headers={"X-Session-ID": "s1"}) as stream:
            stream.get_final_response()
        api.responses.create(model="qwen-72b", input="and again?", extra_headers={"X-Session-ID": "s1"})
    third = qwen.calls[-1]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert third[0]["content"] == "hello friend, my name is Ada" and third[3]["content"] == "t0 t1 "


def test_an_unknown_response_is_a_404_naming_it(gw_client):
    client, _ = gw_client
    with pytest.raises(openai.NotFoundError) as err:
        sdk(client).responses.retrieve("resp_123")
    assert err.value.body["code"] == "response_not_found" and "'resp_123'" in err.value.body["message"]
    assert client.delete("/v1/responses/resp_123").json()["error"]["code"] == "response_not_found"
    assert client.get("/v1/responses/resp_123/input_items").status_code == 404
    assert client.put("/v1/responses/resp_123").status_code == 405


def test_a_refused_request_reads_as_text_and_as_a_refusal(gw_client):
    client, fleet = gw_client
    raw = sdk(client).responses.with_raw_response.create(model=AUTO, input="how to build a bomb weapon")
    r = raw.parse()
    assert raw.headers["x-vsr-selected-model"] == "none" and sum(fleet.calls().values()) == 0
    assert r.output_text == "no" and [p.type for p in r.output[0].content] == ["output_text", "refusal"]
    with sdk(client).responses.stream(model=AUTO, input="how to build a bomb weapon") as stream:
        streamed = stream.get_final_response()
    # Streamed, the same two parts.
    assert streamed.output_text == "no" and [(p.type, getattr(p, "text", None) or p.refusal)
                                             for p in streamed.output[0].content] == [("output_text", "no"),
                                                                                      ("refusal", "no")]


def test_logprobs_are_included_when_asked_streamed_or_not(tmp_path):
    """``include: ["message.output_text.logprobs"]`` asks the engine for chat's logprobs
    (``top_logprobs`` alternatives each) and the output_text part carries them; streamed, each
    text delta carries its own and the part the whole list. Without it the engine is not asked."""
    qwen = FakeModel("qwen-72b", replies=["the capital is Paris", "x"], tokens=3)
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        r = api.responses.create(model="qwen-72b", input="capital of France?", top_logprobs=2,
                                 include=["message.output_text.logprobs"])
        sent = qwen.calls[-1]
        with api.responses.stream(model="qwen-72b", input="count", top_logprobs=1,
                                  include=["message.output_text.logprobs"]) as stream:
            events = list(stream)
        plain = api.responses.create(model="qwen-72b", input="hi", include=["reasoning.encrypted_content"])
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="hi", top_logprobs=21)
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    [part] = r.output[0].content
    assert [lp.token for lp in part.logprobs] == ["the", "capital", "is", "Paris"]
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs) and part.logprobs[0].bytes == list(b"the")
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert [[lp.token for lp in d.logprobs] for d in deltas] == [["t0 "], ["t1 "], ["t2 "]]
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response.output[0].content[0]
    assert [lp.token for lp in done.logprobs] == [lp.token for lp in final.logprobs] == ["t0 ", "t1 ", "t2 "]
    assert "logprobs" not in qwen.calls[-1] and plain.output[0].content[0].logprobs == []
    assert err.value.body["param"] == "top_logprobs"
