"""Third-party clients against the embedded CPU default over a socket: LangChain's ChatOpenAI,
the official OpenAI SDK and OpenAI's Agents SDK, talking to the real SmolLM2-135M engine (vLLM CPU through
ray.serve.llm) behind the gateway, on chat completions, text completions and the Responses API
(LangChain's ``use_responses_api``, the SDK's ``responses`` and its stream helper). Nothing here
was written for Horizon: if these calls work, agents and evaluation tools built on them work.

The tiny model cannot be trusted to *decide* to call a tool, so tool calls are asked for with
``tool_choice`` required or a named function: vLLM forces the call's envelope and (with the
profile's ``tool_calling.strict_level: parameter``) its arguments through the grammar.
``auto`` is exercised for what it is on this model: a valid answer, text or call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

pytestmark = pytest.mark.e2e

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


class Person(BaseModel):
    name: str = Field(description="the person's first name")
    age: int = Field(ge=0, le=120)
    mood: Literal["happy", "sad"]


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def client(serve_local) -> OpenAI:
    return OpenAI(base_url=serve_local.base_url, api_key="unused", max_retries=0, timeout=180)


@pytest.fixture(scope="module")
def llm(serve_local):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=serve_local.base_url, api_key="unused", model="qwen-72b",
                      temperature=0, max_tokens=24, max_retries=0, timeout=180)


@pytest.fixture(scope="module")
def llm_calls(serve_local):
    """Room for a whole tool call or JSON object (a Hermes call with arguments is ~30-40
    tokens on SmolLM2; cut short, the parser cannot read it back)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=serve_local.base_url, api_key="unused", model="qwen-72b",
                      temperature=0, max_tokens=96, max_retries=0, timeout=180)


def check_weather_call(call_name: str, arguments: str | dict) -> None:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert call_name == "get_weather"
    jsonschema.validate(args, WEATHER["function"]["parameters"])


# ---------------------------------------------------------------- LangChain ChatOpenAI
def test_langchain_invoke_stream_batch(llm):
    reply = llm.invoke("Name a colour.")
    assert reply.content.strip() and reply.usage_metadata["output_tokens"] > 0
    pieces = [chunk.content for chunk in llm.stream("Count from one to five.")]
    assert sum(1 for p in pieces if p) >= 3
    answers = llm.batch(["Say hi.", "Say bye."])
    assert len(answers) == 2 and all(a.content.strip() for a in answers)


def test_langchain_async_calls_in_parallel(llm):
    async def many():
        return await asyncio.gather(*(llm.ainvoke(f"Give me a word for number {i}.") for i in range(4)))

    answers = asyncio.run(many())
    assert len(answers) == 4 and all(a.content.strip() for a in answers)


def test_langchain_embeddings_with_the_real_embedder(serve_local):
    """LangChain's OpenAIEmbeddings against the real MiniLM (alias ``bge-m3``), set up as its
    docs say for a server that is not OpenAI: text, not tiktoken's token ids. Its default sends
    token ids, which the gateway refuses with a 400 that names this setting."""
    import numpy as np
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(base_url=serve_local.base_url, api_key="unused", model="bge-m3",
                                  check_embedding_ctx_length=False, max_retries=0)
    docs = embeddings.embed_documents(["The cat sleeps on the sofa.", "Quarterly revenue grew 8 %.",
                                       "A kitten naps on the couch."])
    query = np.asarray(embeddings.embed_query("Where is the cat sleeping?"))
    vectors = np.asarray(docs)
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    similarity = vectors @ query
    assert similarity[0] > similarity[1] and similarity[2] > similarity[1], similarity
    refused = httpx.post(f"{serve_local.base_url}/embeddings", timeout=60,
                         json={"model": "bge-m3", "input": [[791, 8415, 49093]]})
    assert refused.status_code == 400 and "check_embedding_ctx_length=False" in refused.json()["error"]["message"]


def test_langchain_bind_tools_named_and_required(llm_calls):
    llm = llm_calls
    named = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert len(named.tool_calls) == 1
    check_weather_call(named.tool_calls[0]["name"], named.tool_calls[0]["args"])
    required = llm.bind_tools([get_weather], tool_choice="any").invoke("Weather in Oslo?")
    assert required.tool_calls and required.tool_calls[0]["name"] == "get_weather"
    # Streamed, the call arrives as tool-call chunks that add up to the same call.
    merged = None
    for chunk in llm.bind_tools([get_weather], tool_choice="get_weather").stream("Weather in Rome?"):
        merged = chunk if merged is None else merged + chunk
    check_weather_call(merged.tool_calls[0]["name"], merged.tool_calls[0]["args"])


def test_langchain_bind_tools_auto_is_a_valid_answer(llm):
    """auto: the 135M model decides, and mostly answers in prose; either way a valid answer."""
    reply = llm.bind_tools([get_weather]).invoke("Weather in Paris?")
    assert reply.content.strip() or reply.tool_calls


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(llm_calls, method):
    person = llm_calls.with_structured_output(Person, method=method).invoke("Ada is 36 and happy. Who is she?")
    assert isinstance(person, Person)


# ---------------------------------------------------------------- OpenAI SDK
def test_sdk_parse_a_pydantic_model(client):
    out = client.chat.completions.parse(model="qwen-72b", temperature=0, max_tokens=48,
                                        messages=[{"role": "user", "content": "Ada is 36 and happy."}],
                                        response_format=Person)
    assert isinstance(out.choices[0].message.parsed, Person)


def test_sdk_parse_cut_at_the_token_limit_is_the_sdks_length_error_not_a_5xx(client):
    # Three tokens cannot hold the object: the gateway returns the cut answer with finish_reason
    # "length" (as OpenAI does), so the SDK raises its own error instead of retrying a 502.
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(model="qwen-72b", temperature=0, max_tokens=3,
                                      messages=[{"role": "user", "content": "Ada is 36 and happy."}],
                                      response_format=Person)


def test_json_schema_cut_at_the_token_limit_comes_back_truncated(serve_local):
    # The grammar forces the object's two required keys: no complete answer fits in 4 tokens.
    schema = {"type": "object", "required": ["name", "age"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=180, json={
        "model": "k2", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "Describe Ada, 36, as a JSON object."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-structured-output"] == "truncated"
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_sdk_tool_calls_forced(client, tool_choice):
    resp = client.chat.completions.with_raw_response.create(
        model="qwen-72b", temperature=0, max_tokens=48, messages=ASK, tools=[WEATHER, TIME],
        tool_choice=tool_choice, parallel_tool_calls=False)
    message = resp.parse().choices[0].message
    assert len(message.tool_calls) == 1 and message.tool_calls[0].id
    if tool_choice == "required":
        assert message.tool_calls[0].function.name in {"get_weather", "get_time"}
    else:
        check_weather_call(message.tool_calls[0].function.name, message.tool_calls[0].function.arguments)
    assert resp.headers["x-vsr-selected-model"] == "qwen-72b"


def test_sdk_tool_call_streamed_and_the_round_trip(client):
    stream = client.chat.completions.create(
        model="k2", temperature=0, max_tokens=48, messages=ASK, tools=[WEATHER], stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    name, arguments, call_id = "", "", None
    for chunk in stream:
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call_id = call_id or delta_call.id
            name += delta_call.function.name or ""
            arguments += delta_call.function.arguments or ""
    check_weather_call(name, arguments)
    # The tool's result goes back as a tool message; tool_choice none: the model answers in text.
    follow = client.chat.completions.create(
        model="k2", temperature=0, max_tokens=24, tools=[WEATHER], tool_choice="none", messages=[
            *ASK, {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21 degrees"}])
    assert follow.choices[0].message.content.strip() and not follow.choices[0].message.tool_calls


def test_sdk_tools_through_auto_routing(client):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/auto", temperature=0, max_tokens=48, messages=ASK, tools=[WEATHER],
        tool_choice="required")
    assert resp.parse().choices[0].message.tool_calls[0].function.name == "get_weather"
    assert resp.headers["x-vsr-selected-decision"]


def test_sdk_bad_tool_input_is_a_400_naming_the_parameter(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="qwen-72b", messages=ASK, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert err.value.body["param"] == "tool_choice"


def test_sdk_n_and_logprobs(client):
    out = client.chat.completions.create(model="qwen-72b", temperature=0.9, max_tokens=6, n=2,
                                         messages=[{"role": "user", "content": "Name an animal."}])
    assert [c.index for c in out.choices] == [0, 1] and all(c.message.content for c in out.choices)
    lp = client.chat.completions.create(model="qwen-72b", temperature=0, max_tokens=3, logprobs=True,
                                        top_logprobs=2, messages=[{"role": "user", "content": "Hi"}])
    tokens = lp.choices[0].logprobs.content
    assert len(tokens) == lp.usage.completion_tokens and len(tokens[0].top_logprobs) == 2
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="qwen-72b", n=100, messages=[{"role": "user", "content": "Hi"}])
    assert err.value.body["param"] == "n"


def test_sdk_models_retrieve(client):
    model = client.models.retrieve("qwen-72b")
    assert model.id == "qwen-72b" and model.object == "model"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-9")
    assert err.value.body["code"] == "model_not_found"


def test_sdk_completions(client, serve_local):
    out = client.completions.with_raw_response.create(model="k2", prompt="The capital of France is",
                                                      max_tokens=6, temperature=0)
    body = out.parse()
    assert body.object == "text_completion" and body.choices[0].text.strip()
    assert 0 < body.usage.completion_tokens <= 6 and out.headers["x-vsr-selected-model"] == "k2"
    pieces = [c for c in client.completions.create(model="k2", prompt="One, two,", max_tokens=5, temperature=0,
                                                   stream=True, stream_options={"include_usage": True})]
    assert sum(1 for c in pieces if c.choices and c.choices[0].text) >= 2
    assert pieces[-1].usage.completion_tokens == 5
    routed = client.completions.with_raw_response.create(
        model="vllm-sr/auto", prompt="def reverse(items):\n    # python function code", max_tokens=6)
    assert routed.headers["x-vsr-selected-decision"] and routed.parse().choices[0].text is not None
    both = httpx.post(f"{serve_local.base_url}/completions", timeout=30, json={
        "model": "k2", "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]})
    assert both.status_code == 400 and both.json()["error"]["param"] == "messages"
    # A batch: each prompt fits the 2,048-token window on its own, the ten together (~3,400
    # tokens) do not; one choice per prompt (refused as one joined prompt before).
    batch = client.completions.create(model="k2", prompt=["The quick brown fox jumps over the lazy dog. " * 30] * 10,
                                      max_tokens=2, temperature=0)
    assert sorted(c.index for c in batch.choices) == list(range(10)) and batch.usage.prompt_tokens > 2048


# ---------------------------------------------------------------- the Responses API
WEATHER_FLAT = {"type": "function", **WEATHER["function"]}   # Responses' tools are flat


def test_sdk_responses_text_stream_and_routing(client):
    resp = client.responses.with_raw_response.create(model="qwen-72b", input="Name a colour.",
                                                     instructions="Answer in one word.", max_output_tokens=8)
    body = resp.parse()
    assert body.object == "response" and body.output_text.strip() and resp.headers["x-vsr-selected-model"] == "qwen-72b"
    assert 0 < body.usage.output_tokens <= 8 and body.usage.input_tokens > 0
    # The SDK's stream helper rebuilds the response from the events and checks their order. The
    # tiny model may run to the token limit: then the last event is response.incomplete, as OpenAI's.
    with client.responses.stream(model="k2", input="Count from one to five.", max_output_tokens=12) as stream:
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    final = events[-1].response
    assert events[-1].type == ("response.incomplete" if final.incomplete_details else "response.completed")
    assert len(deltas) >= 2 and final.output_text == "".join(deltas) and 0 < final.usage.output_tokens <= 12
    routed = client.responses.with_raw_response.create(model="vllm-sr/auto", max_output_tokens=8,
                                                       input="def reverse(items):  # python function code")
    assert routed.headers["x-vsr-selected-decision"] and routed.parse().status in {"completed", "incomplete"}


def test_sdk_responses_parse_a_pydantic_model(client):
    out = client.responses.parse(model="qwen-72b", temperature=0, max_output_tokens=48,
                                 input="Ada is 36 and happy.", text_format=Person)
    assert isinstance(out.output_parsed, Person)


def test_sdk_responses_tool_call_streamed_and_the_round_trip(client):
    with client.responses.stream(model="k2", input=ASK, tools=[WEATHER_FLAT], max_output_tokens=48,
                                 tool_choice={"type": "function", "name": "get_weather"}) as stream:
        final = stream.get_final_response()
    [call] = [item for item in final.output if item.type == "function_call"]
    check_weather_call(call.name, call.arguments)
    follow = client.responses.create(model="k2", tools=[WEATHER_FLAT], tool_choice="none", max_output_tokens=24, input=[
        *ASK, {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 degrees"}])
    assert follow.output_text.strip() and not [i for i in follow.output if i.type == "function_call"]
    # The same round trip as OpenAI's docs write it: the stored response, then only the output.
    stored = client.responses.create(model="k2", tools=[WEATHER_FLAT], tool_choice="none", max_output_tokens=24,
                                     previous_response_id=final.id, input=[
                                         {"type": "function_call_output", "call_id": call.call_id,
                                          "output": "sunny, 21 degrees"}])
    assert stored.previous_response_id == final.id and stored.output_text.strip()
    assert client.responses.retrieve(stored.id).output_text == stored.output_text
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="k2", input="hi", previous_response_id="resp_never_stored")
    assert err.value.body["code"] == "previous_response_not_found"


def test_sdk_responses_in_a_conversation_with_a_tool_round_trip(client):
    # The Conversations API as the Agents SDK uses it: the conversation gathers every turn (the
    # call, its output, the answers), and each response reads it; tools: [] (an agent without
    # tools) is no tools for the engine, which refuses an empty list.
    conv = client.conversations.create(metadata={"case": "e2e"})
    first = client.responses.create(model="k2", conversation=conv.id, input=ASK, tools=[WEATHER_FLAT],
                                    max_output_tokens=48, tool_choice={"type": "function", "name": "get_weather"})
    [call] = [item for item in first.output if item.type == "function_call"]
    check_weather_call(call.name, call.arguments)
    answer = client.responses.create(model="k2", conversation=conv.id, tools=[], max_output_tokens=24, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 degrees"}])
    assert answer.conversation.id == conv.id and answer.output_text.strip()
    items = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.type for i in items] == ["message", "function_call", "function_call_output", "message"]
    assert items[1].call_id == call.call_id and items[3].id == answer.output[0].id
    assert client.conversations.delete(conv.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="k2", conversation=conv.id, input="hi")


def test_sdk_responses_logprobs_from_the_real_engine(client):
    include = ["message.output_text.logprobs"]
    r = client.responses.create(model="qwen-72b", input="Name a colour.", max_output_tokens=8,
                                temperature=0, include=include, top_logprobs=2)
    [part] = r.output[0].content
    assert 0 < len(part.logprobs) <= r.usage.output_tokens
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in part.logprobs)
    assert "".join(lp.token for lp in part.logprobs).strip() == part.text.strip()
    with client.responses.stream(model="qwen-72b", input="Name a colour.", max_output_tokens=8,
                                 temperature=0, include=include, top_logprobs=2) as stream:
        events = list(stream)
    deltas = [lp.token for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert deltas == [lp.token for lp in events[-1].response.output[0].content[0].logprobs]
    assert "".join(deltas).strip() == events[-1].response.output_text.strip()


def test_sdk_responses_truncation_auto_fits_a_long_conversation_to_the_real_engine(client):
    # Four long items (about 900 estimated tokens each) in a conversation: over the 2,048-token
    # window. OpenAI's default refuses before any model runs; "auto" drops the oldest turns and
    # the real engine answers what is left.
    long = "alpha beta gamma delta " * 160
    conv = client.conversations.create(items=[{"type": "message", "role": role, "content": f"{i}: {long}"}
                                              for i, role in enumerate(["user", "assistant"] * 2)])
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="qwen-72b", conversation=conv.id, input="Say hi.", max_output_tokens=8)
    assert (err.value.body["code"], err.value.body["param"]) == ("context_length_exceeded", "input")
    raw = client.responses.with_raw_response.create(model="qwen-72b", conversation=conv.id, input="Say hi.",
                                                    max_output_tokens=8, truncation="auto")
    r = raw.parse()
    assert int(raw.headers["x-vsr-context-dropped-messages"]) >= 2 and r.truncation == "auto"
    assert r.status in {"completed", "incomplete"} and 0 < r.usage.input_tokens <= 2048 - 8
    # The conversation keeps every item: only what the model read was cut.
    assert len(list(client.conversations.items.list(conv.id))) == 4 + 2


def test_langchain_on_the_responses_api(serve_local):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=serve_local.base_url, api_key="unused", model="qwen-72b", temperature=0,
                     max_tokens=96, max_retries=0, timeout=180, use_responses_api=True)
    assert llm.invoke("Name a colour.").text.strip()
    call = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?").tool_calls[0]
    check_weather_call(call["name"], call["args"])
    # use_previous_response_id: LangChain sends only the messages after its last answer, and
    # that answer's response id.
    chained = llm.model_copy(update={"use_previous_response_id": True})
    first = chained.invoke("My name is Ada.")
    second = chained.invoke([("human", "My name is Ada."), first, ("human", "What is my name?")])
    assert first.response_metadata["id"].startswith("resp_") and second.text.strip()


# ---------------------------------------------------------------- Fusion with tools
FUSION = {"plugins": [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b"],
                       "analysis_mode": "none", "max_completion_tokens": 48}]}


def test_fusion_synthesis_returns_the_tool_call(client):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/fusion", temperature=0, messages=ASK, tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, extra_body=FUSION)
    choice = resp.parse().choices[0]
    assert choice.finish_reason == "tool_calls"
    check_weather_call(choice.message.tool_calls[0].function.name, choice.message.tool_calls[0].function.arguments)
    assert resp.headers["x-vsr-fusion-judge"] == "k2" and resp.headers["x-vsr-fusion-usable"] == "1"

    stream = client.chat.completions.create(
        model="vllm-sr/fusion", temperature=0, messages=ASK, tools=[WEATHER], tool_choice="required",
        stream=True, extra_body=FUSION)
    name, arguments, finish = "", "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        finish = chunk.choices[0].finish_reason or finish
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            name += delta_call.function.name or ""
            arguments += delta_call.function.arguments or ""
    assert finish == "tool_calls"
    check_weather_call(name, arguments)


# ---------------------------------------------------------------- OpenAI Agents SDK
# The Agents SDK drives a model through its whole loop: it calls the tools the model asks for,
# sends their output back, hands off between agents, parses a typed final output, and keeps
# the conversation in a session (OpenAI's Conversations API) or by response id. Each run is
# one asyncio.run with its own AsyncOpenAI client (an httpx client belongs to one loop).
# Tracing is off: it would export to OpenAI's servers.
AGENT_SETTINGS = {"max_tokens": 64, "temperature": 0}


@pytest.fixture(scope="module")
def agents_sdk(serve_local):
    import agents

    agents.set_tracing_disabled(True)

    def model(api: str, name: str):
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=serve_local.base_url, api_key="unused", max_retries=0, timeout=180)
        cls = agents.OpenAIResponsesModel if api == "responses" else agents.OpenAIChatCompletionsModel
        return cls(model=name, openai_client=client), client

    return model


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_sdk_runs_a_tool_loop_streamed_and_not(agents_sdk, api):
    from agents import Agent, ModelSettings, Runner, function_tool

    calls = []

    @function_tool
    def weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """Current weather in a city."""
        calls.append({"city": city, "unit": unit})
        return f"sunny in {city}"

    async def scenario():
        model, _ = agents_sdk(api, "k2")
        # Forced once (the tiny model cannot be trusted to choose it); reset_tool_choice lets
        # the turn after the tool's output answer in text.
        agent = Agent(name="weather", instructions="Use tools.", model=model, tools=[weather],
                      reset_tool_choice=True,
                      model_settings=ModelSettings(**AGENT_SETTINGS, tool_choice="weather"))
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
        streamed = Runner.run_streamed(agent, "What is the weather in Rome?", max_turns=4)
        item_events = [e.name async for e in streamed.stream_events() if e.type == "run_item_stream_event"]
        return result, streamed, item_events

    result, streamed, item_events = asyncio.run(scenario())
    assert [type(i).__name__ for i in result.new_items] == ["ToolCallItem", "ToolCallOutputItem", "MessageOutputItem"]
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert item_events == ["tool_called", "tool_output", "message_output_created"]
    assert isinstance(streamed.final_output, str) and streamed.final_output.strip()
    assert len(calls) == 2 and all(c["unit"] in ("celsius", "fahrenheit") and c["city"] for c in calls)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_sdk_typed_output_and_a_handoff(agents_sdk, api):
    from agents import Agent, ModelSettings, Runner

    async def scenario():
        extractor = Agent(name="extractor", instructions="Extract the person.", output_type=Person,
                          model=agents_sdk(api, "qwen-72b")[0], model_settings=ModelSettings(**AGENT_SETTINGS))
        person = await Runner.run(extractor, "Ada is 36 and happy.")
        spanish = Agent(name="spanish", instructions="Answer in Spanish.", model=agents_sdk(api, "k2")[0],
                        model_settings=ModelSettings(**AGENT_SETTINGS))
        triage = Agent(name="triage", instructions="Hand off to the right agent.", handoffs=[spanish],
                       model=agents_sdk(api, "k2")[0], reset_tool_choice=True,
                       model_settings=ModelSettings(**AGENT_SETTINGS, tool_choice="required"))
        handed = await Runner.run(triage, "Hola, ¿qué tal?", max_turns=4)
        return person, handed

    person, handed = asyncio.run(scenario())
    assert isinstance(person.final_output, Person)
    assert handed.last_agent.name == "spanish"
    assert [type(i).__name__ for i in handed.new_items][:2] == ["HandoffCallItem", "HandoffOutputItem"]


def test_agents_sdk_keeps_a_conversation_in_a_session_by_id_and_by_response(agents_sdk):
    from agents import Agent, ModelSettings, OpenAIConversationsSession, Runner

    async def scenario():
        model, client = agents_sdk("responses", "k2")
        agent = Agent(name="plain", instructions="Answer briefly.", model=model,
                      model_settings=ModelSettings(**AGENT_SETTINGS))
        # The session: the SDK stores each turn's items in a conversation it creates.
        session = OpenAIConversationsSession(openai_client=client)
        await Runner.run(agent, "What is 2+2?", session=session)
        second = await Runner.run(agent, "Name one colour.", session=session)
        session_items = await session.get_items()
        read = await client.responses.input_items.list(second.last_response_id, order="asc")
        conversation_id = session.session_id
        await session.clear_session()
        # conversation_id: the gateway reads and extends the conversation itself.
        conv = await client.conversations.create()
        await Runner.run(agent, "What is 2+2?", conversation_id=conv.id)
        await Runner.run(agent, "Name one colour.", conversation_id=conv.id)
        conv_items = (await client.conversations.items.list(conv.id, order="asc")).data
        # previous_response_id: the gateway's stored response continues the chain.
        first = await Runner.run(agent, "What is 2+2?", auto_previous_response_id=True)
        chained = await Runner.run(agent, "Name one colour.", previous_response_id=first.last_response_id)
        stored = await client.responses.retrieve(chained.last_response_id)
        try:
            await client.conversations.retrieve(conversation_id)
            cleared = False
        except openai.NotFoundError:
            cleared = True
        return session_items, read.data, conv_items, first, stored, cleared

    session_items, read, conv_items, first, stored, cleared = asyncio.run(scenario())
    roles = ["user", "assistant", "user", "assistant"]
    assert [(i["type"], i["role"]) for i in session_items] == [("message", r) for r in roles]
    # The second turn's model call read the first turn: the question and its answer.
    texts = [part.text for item in read if item.type == "message" for part in item.content]
    assert "What is 2+2?" in texts and "Name one colour." in texts and len(texts) >= 3
    assert [(i.type, i.role) for i in conv_items] == [("message", r) for r in roles]
    assert stored.previous_response_id == first.last_response_id
    assert cleared
