"""The OpenAI surface clients use beyond plain chat, in process over the shared fake fleet:
tools and tool_choice (checked before any model call, routed only to models with tool calling),
``n`` (passed through, bounded, refused by Fusion), ``GET /v1/models/{id}`` and
``POST /v1/completions`` (routing on the prompt, streaming, errors, headers, fallback)."""

from __future__ import annotations

import json

import pytest

from fakes.fleet import FakeModel
from fakes.gateway import gateway_profile, running_gateway
from fakes.responses import completion, tool_call
from fakes.routing import chat

AUTO = "vllm-sr/auto"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture
def gw(tmp_path):
    with running_gateway(tmp_path / "intents") as parts:
        yield parts


def post(client, path, body, **headers):
    return client.post(path, json=body, headers=headers)


def sse_events(response) -> list:
    return [line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
            for line in response.text.splitlines() if line.startswith("data: ")]


def no_tools_profile(tmp_path, **overrides):
    """minicpm-v as a vLLM model without tool calling; the vision decision refuses tool
    requests (the profile would not validate otherwise)."""
    doc = gateway_profile(tmp_path / "intents", **overrides)
    vision = next(m for m in doc["models"] if m["alias"] == "minicpm-v")
    vision["backend"] = "vllm"
    next(d for d in doc["routing"]["decisions"] if d["name"] == "vision")["tool_requests"] = "refuse"
    return doc


# ---------------------------------------------------------------- bad input: 400 before any model
@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "no-such-type"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": 3}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"n": 9}, "n"),
    ({"n": 0}, "n"),
])
@pytest.mark.parametrize("model", ["qwen-72b", AUTO])
def test_bad_tools_and_n_are_a_400_naming_the_parameter_before_any_model(gw, extra, param, model):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {"model": model, **chat("fix the bug in my python code"), **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    assert sum(fleet.calls().values()) == 0   # not even the intent classifier


def test_the_n_limit_is_the_profiles(tmp_path):
    doc = gateway_profile(tmp_path / "intents", **{"global": {"server": {"max_n": 2}}})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {"model": "qwen-72b", "n": 3, **chat("hi there friend")})
        assert r.status_code == 400 and "maximum of 2" in r.json()["error"]["message"]
        assert post(client, "/v1/chat/completions", {"model": "qwen-72b", "n": 2, **chat("hi there friend")}).status_code == 200


# ---------------------------------------------------------------- n
def test_n_passes_through_to_the_engine_and_every_choice_comes_back(tmp_path):
    def two_choices(request):
        answer = completion("a", model="qwen-72b")
        answer["choices"] = [{"index": i, "message": {"role": "assistant", "content": f"choice {i}"},
                              "finish_reason": "stop"} for i in range(request["n"])]
        return answer

    with running_gateway(tmp_path / "intents", FakeModel("qwen-72b", two_choices)) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {"model": "qwen-72b", "n": 3, **chat("hi there friend")})
        assert r.status_code == 200
        assert [c["message"]["content"] for c in r.json()["choices"]] == ["choice 0", "choice 1", "choice 2"]
        assert fleet.models["qwen-72b"].calls[0]["n"] == 3


def test_n_with_a_json_schema_checks_every_choice_and_replays_them_all(tmp_path):
    def answers(request):
        answer = completion("x", model="qwen-72b")
        answer["choices"] = [{"index": i, "message": {"role": "assistant", "content": json.dumps({"n": i})},
                              "finish_reason": "stop"} for i in range(request.get("n", 1))]
        return answer

    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    with running_gateway(tmp_path / "intents", FakeModel("qwen-72b", answers)) as (client, _, _):
        body = {"model": "qwen-72b", "n": 2, **chat("count friend"), "response_format": {
            "type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
        r = post(client, "/v1/chat/completions", body)
        assert r.status_code == 200 and r.headers["x-vsr-structured-output"] == "valid"
        assert [json.loads(c["message"]["content"]) for c in r.json()["choices"]] == [{"n": 0}, {"n": 1}]
        stream = post(client, "/v1/chat/completions", {**body, "stream": True})
        events = [e for e in sse_events(stream) if e != "[DONE]"]
        text = {i: "".join(c["choices"][0]["delta"].get("content") or "" for c in events
                           if c["choices"] and c["choices"][0]["index"] == i) for i in (0, 1)}
        assert text == {0: '{"n":0}', 1: '{"n":1}'}


def test_fusion_refuses_n_above_one_before_the_panel(gw):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {
        "model": "vllm-sr/fusion", "n": 2, **chat("compare these"),
        "plugins": [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "coder"]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    assert sum(fleet.calls().values()) == 0


# ---------------------------------------------------------------- tools reach tool models only
def test_tools_and_tool_choice_reach_the_model_and_tool_calls_come_back(tmp_path):
    calling = FakeModel("qwen-72b", completion(None, model="qwen-72b", finish_reason="tool_calls",
                                               tool_calls=[tool_call("get_weather", {"city": "Paris"})]))
    with running_gateway(tmp_path / "intents", calling) as (client, _, fleet):
        choice = {"type": "function", "function": {"name": "get_weather"}}
        r = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("weather in paris friend"),
                                                  "tools": [WEATHER], "tool_choice": choice})
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        sent = fleet.models["qwen-72b"].calls[0]
        assert sent["tools"] == [WEATHER] and sent["tool_choice"] == choice
        stream = post(client, "/v1/chat/completions", {"model": "qwen-72b", "stream": True,
                                                       **chat("weather friend"), "tools": [WEATHER]})
        assert stream.status_code == 200


def test_a_model_without_tool_calling_is_a_400_naming_it(tmp_path):
    with running_gateway(tmp_path / "intents", doc=no_tools_profile(tmp_path)) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {"model": "minicpm-v", **chat("describe it"), "tools": [WEATHER]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
        assert "'minicpm-v' has no tool calling" in r.json()["error"]["message"]
        # tool_choice none: the tools are only context, any model takes it.
        ok = post(client, "/v1/chat/completions", {"model": "minicpm-v", **chat("describe it"),
                                                   "tools": [WEATHER], "tool_choice": "none"})
        assert ok.status_code == 200
        assert len(fleet.models["minicpm-v"].calls) == 1


def test_a_decision_that_refuses_tool_requests_says_so(tmp_path):
    with running_gateway(tmp_path / "intents", doc=no_tools_profile(tmp_path)) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {"model": AUTO, **chat("describe the photo image"),
                                                  "tools": [WEATHER]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "tools_not_supported"
        assert "decision 'vision'" in r.json()["error"]["message"]
        assert r.headers["x-vsr-selected-decision"] == "vision"
        assert len(fleet.models["minicpm-v"].calls) == 0


def test_a_fusion_judge_without_tool_calling_fails_before_the_panel(tmp_path):
    with running_gateway(tmp_path / "intents", doc=no_tools_profile(tmp_path)) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {
            "model": "vllm-sr/fusion", **chat("compare these"), "tools": [WEATHER],
            "plugins": [{"id": "fusion", "model": "minicpm-v", "analysis_models": ["qwen-72b", "coder"]}]})
        assert r.status_code == 400 and "the Fusion judge 'minicpm-v'" in r.json()["error"]["message"]
        assert sum(fleet.calls().values()) == 0


def test_fusion_with_a_tool_judge_returns_its_tool_calls(gw):
    client, _, fleet = gw
    fleet.models["k2"].replies = ["analysis", completion(None, model="k2", tool_calls=[tool_call("get_weather")])]
    r = post(client, "/v1/chat/completions", {
        "model": "vllm-sr/fusion", **chat("compare these"), "tools": [WEATHER], "tool_choice": "required",
        "plugins": [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "coder"]}]})
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert "tools" not in fleet.models["qwen-72b"].calls[0]            # the panel is text-only
    assert fleet.models["k2"].calls[-1]["tools"] == [WEATHER]         # the synthesis has them


COUNT_SCHEMA = {"type": "json_schema", "json_schema": {"name": "count", "schema": {
    "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
FUSION_PANEL = [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "coder"]}]


def fusion_count(gw, judge_answer: str):
    """A Fusion request for COUNT_SCHEMA whose judge k2 answers ``judge_answer`` last."""
    client, _, fleet = gw
    fleet.models["k2"].replies = ["analysis", judge_answer]
    r = post(client, "/v1/chat/completions", {"model": "vllm-sr/fusion", **chat("count to four"),
                                              "response_format": COUNT_SCHEMA, "plugins": FUSION_PANEL})
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"n": 4}
    return r, fleet


def test_fusion_json_from_a_judge_whose_engine_constrains_decoding(gw):
    # The judge's engine decodes its final answer under the grammar (the fake stands in for
    # it); the panel and the analysis stay free text; every call reads the requirement.
    r, fleet = fusion_count(gw, '{"n": 4}')
    assert r.headers["x-vsr-structured-output"] == "valid"
    analysis, synthesis = fleet.models["k2"].calls
    assert synthesis["response_format"] == COUNT_SCHEMA
    assert analysis["response_format"]["json_schema"]["name"] == "fusion_analysis"
    for call in (fleet.models["qwen-72b"].calls[0], fleet.models["coder"].calls[0]):
        assert "response_format" not in call
        assert "JSON Schema" in json.dumps(call["messages"])
    assert "JSON Schema" in json.dumps(synthesis["messages"])


def test_fusion_json_from_a_judge_that_cannot_constrain_is_extracted_and_repaired(gw, monkeypatch):
    from serve_app.fleet.backends import backend

    monkeypatch.setattr(backend("simulated"), "constrains_decoding", False)
    r, fleet = fusion_count(gw, 'Here it is:\n```json\n{"n": 4,}\n```')
    assert r.headers["x-vsr-structured-output"] == "repaired"
    assert "response_format" not in fleet.models["k2"].calls[-1]


def test_a_fallback_hop_skips_models_without_tool_calling(tmp_path):
    doc = no_tools_profile(tmp_path)
    doc["resilience"]["fallback_chains"]["chat"] = ["qwen-72b", "minicpm-v", "k2"]
    doc["resilience"]["max_fallback_depth"] = 1
    # horizon validate would refuse a chat decision routing tools into this chain; a direct
    # alias request still walks it.
    next(d for d in doc["routing"]["decisions"] if d["name"] == "general_chat")["tool_requests"] = "refuse"
    with running_gateway(tmp_path / "intents", FakeModel("qwen-72b", mode="error"), doc=doc) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend"), "tools": [WEATHER]})
        assert r.status_code == 200 and r.headers["x-vsr-fallback"] == "qwen-72b:error,k2:ok"
        assert len(fleet.models["minicpm-v"].calls) == 0
        # Without tools the chain is the configured one.
        plain = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend")})
        assert plain.headers["x-vsr-fallback"] == "qwen-72b:error,minicpm-v:ok"


def test_a_model_without_parallel_calls_is_asked_for_one(tmp_path):
    doc = gateway_profile(tmp_path / "intents")
    next(m for m in doc["models"] if m["alias"] == "coder")["tool_calling"] = {"parallel_calls": False}
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, fleet):
        post(client, "/v1/chat/completions", {"model": "coder", **chat("code"), "tools": [WEATHER]})
        assert fleet.models["coder"].calls[0]["parallel_tool_calls"] is False


# ---------------------------------------------------------------- model lookup
def test_model_retrieve_and_the_openai_404(gw):
    client, _, _ = gw
    assert client.get("/v1/models/coder").json()["id"] == "coder"
    missing = client.get("/v1/models/gpt-9")
    assert missing.status_code == 404
    assert missing.json() == {"error": {"message": "The model 'gpt-9' does not exist",
                                        "type": "invalid_request_error", "param": "model",
                                        "code": "model_not_found"}}


# ---------------------------------------------------------------- /v1/completions
def test_completions_direct_alias_non_stream(gw):
    client, _, fleet = gw
    r = post(client, "/v1/completions", {"model": "coder", "prompt": "def add(a, b):", "max_tokens": 8, "n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and [c["text"] for c in body["choices"]] == ["hello", "hello"]
    assert r.headers["x-vsr-selected-model"] == "coder"
    sent = fleet.models["coder"].calls[0]
    assert sent["prompt"] == "def add(a, b):" and sent["max_tokens"] == 8 and "messages" not in sent


def test_completions_auto_routes_on_the_prompt_text(gw):
    client, _, fleet = gw
    r = post(client, "/v1/completions", {"model": AUTO, "prompt": "fix the bug in my python function code"},
             **{"x-vsr-debug": "true"})
    assert r.status_code == 200
    assert r.headers["x-vsr-selected-decision"] == "code" and r.headers["x-vsr-selected-model"] == "coder"
    assert "x-vsr-matched-signals" in r.headers
    assert fleet.models["coder"].calls[0]["temperature"] == 0.1      # the routing matrix applies


def test_completions_stream_is_sse_of_text_completion_chunks(gw):
    client, _, _ = gw
    r = post(client, "/v1/completions", {"model": "qwen-72b", "prompt": "hello friend", "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "t0 t1 t2 "
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_completions_fall_back_like_chat(tmp_path):
    with running_gateway(tmp_path / "intents", FakeModel("qwen-72b", mode="error")) as (client, _, fleet):
        r = post(client, "/v1/completions", {"model": "qwen-72b", "prompt": "hello friend"})
        assert r.status_code == 200 and r.headers["x-vsr-fallback"] == "qwen-72b:error,k2:ok"
        off = post(client, "/v1/completions", {"model": "qwen-72b", "prompt": "hello friend"},
                   **{"x-vsr-allow-fallback": "false"})
        assert off.status_code == 502 and off.json()["error"]["code"] == "upstream_error"


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"model": "qwen-72b", "prompt": "hello friend"}),
    ("/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend")}),
    ("/v1/responses", {"model": "qwen-72b", "input": "hello friend"}),
])
def test_the_switch_headers_take_true_or_false_and_refuse_anything_else(tmp_path, path, body):
    # Read as "not true", x-vsr-allow-fallback: 1 (or yes) silently turned the chain off.
    with running_gateway(tmp_path / "intents", FakeModel("qwen-72b", mode="error")) as (client, _, fleet):
        for value in ("1", "yes", "on"):
            r = post(client, path, body, **{"x-vsr-allow-fallback": value})
            assert r.status_code == 400 and r.json()["error"]["param"] == "x-vsr-allow-fallback", (value, r.text)
        bad_debug = post(client, path, body, **{"x-vsr-debug": "1"})
        assert bad_debug.status_code == 400 and bad_debug.json()["error"]["param"] == "x-vsr-debug"
        assert sum(fleet.calls().values()) == 0
        for value in ("TRUE", ""):      # empty is absent: the default, fallback on
            assert post(client, path, body, **{"x-vsr-allow-fallback": value}).headers["x-vsr-fallback"] == \
                "qwen-72b:error,k2:ok"
        assert post(client, path, body, **{"x-vsr-allow-fallback": "False"}).status_code == 502


def test_route_reads_the_debug_switch_the_same_way(gw):
    client, _, _ = gw
    body = {"model": AUTO, **chat("fix the bug in my python function code")}
    assert "x-vsr-matched-signals" in post(client, "/v1/route", body, **{"x-vsr-debug": "True"}).headers
    assert post(client, "/v1/route", body, **{"x-vsr-debug": "yes"}).status_code == 400


def test_completions_refusal_decision_answers_without_a_model(gw):
    client, _, fleet = gw
    r = post(client, "/v1/completions", {"model": AUTO, "prompt": "how to build a bomb weapon"})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "no"
    assert r.headers["x-vsr-selected-model"] == "none" and sum(fleet.calls().values()) == 0


@pytest.mark.parametrize("body, status, param", [
    ({"model": "qwen-72b", "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]}, 400, "messages"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]}, 400, "messages"),
    ({"model": "qwen-72b"}, 400, "prompt"),
    ({"model": "qwen-72b", "prompt": []}, 400, "prompt"),
    ({"model": "qwen-72b", "prompt": "hi", "n": 99}, 400, "n"),
    ({"model": AUTO, "prompt": [1, 2, 3]}, 400, "prompt"),
    ({"model": "vllm-sr/fusion", "prompt": "hi"}, 400, "model"),
    ({"model": "embed", "prompt": "hi"}, 400, "model"),
    ({"model": "nope", "prompt": "hi"}, 404, "model"),
    ({"model": "qwen-72b", "prompt": "hi " * 20000}, 400, "prompt"),
])
def test_completions_bad_input_names_the_parameter_before_any_model(gw, body, status, param):
    client, _, fleet = gw
    r = post(client, "/v1/completions", body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    assert sum(fleet.calls().values()) == 0


def test_completions_batch_fits_prompt_by_prompt_not_joined(gw):
    # Each prompt of a batch is a sequence of its own: ten prompts of ~1,500 tokens fit qwen-72b's
    # 4,096-token window although together they are ~15,000 (lm-eval and other batch clients
    # send such lists). Refused as one joined prompt before, with a 400 naming prompt.
    client, _, fleet = gw
    prompts = ["word " * 1200] * 10
    r = post(client, "/v1/completions", {"model": "qwen-72b", "prompt": prompts, "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert fleet.models["qwen-72b"].calls[0]["prompt"] == prompts
    # One prompt of the batch past the window is still refused before any model call.
    too_long = post(client, "/v1/completions", {"model": "qwen-72b", "max_tokens": 8,
                                                "prompt": ["hi", "word " * 4000]})
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "prompt"
    assert "in the prompt" in too_long.json()["error"]["message"]
    assert len(fleet.models["qwen-72b"].calls) == 1


def test_completions_token_ids_go_to_a_named_model(gw):
    client, _, fleet = gw
    assert post(client, "/v1/completions", {"model": "k2", "prompt": [1, 2, 3]}).status_code == 200
    assert fleet.models["k2"].calls[0]["prompt"] == [1, 2, 3]
