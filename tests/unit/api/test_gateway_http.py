"""The HTTP surface in process: the real app, pipeline, routing, resilience and Fusion over the
shared fake fleet (FastAPI's test client, no Ray). What the e2e suite checks over a socket with a
real cluster, checked here in milliseconds: status codes, OpenAI error bodies, x-vsr-* headers,
SSE framing, auth, sessions and fallbacks."""

from __future__ import annotations

import base64
import gzip
import json

import openai
import pytest

from fakes.fleet import FakeModel
from fakes.gateway import gateway_profile, running_gateway
from fakes.routing import chat

AUTO = "vllm-sr/auto"


@pytest.fixture
def gw(tmp_path):
    with running_gateway(tmp_path / "intents") as parts:
        yield parts


def post(client, path, body, **headers):
    return client.post(path, json=body, headers=headers)


def sse_events(response) -> list:
    events = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


# ---------------------------------------------------------------- models
def test_models_list_and_retrieve(gw):
    client, _, _ = gw
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert {"k2", "qwen-72b", "coder", "embed", AUTO, "vllm-sr/fusion"} <= set(ids)
    one = client.get("/v1/models/qwen-72b")
    assert one.status_code == 200 and one.json()["id"] == "qwen-72b" and one.json()["object"] == "model"
    slug = client.get(f"/v1/models/{AUTO}")
    assert slug.status_code == 200 and slug.json()["role"] == "router"
    missing = client.get("/v1/models/gpt-9")
    assert missing.status_code == 404
    assert missing.json()["error"] == {"message": "The model 'gpt-9' does not exist", "type": "invalid_request_error",
                                       "param": "model", "code": "model_not_found"}


def test_the_openapi_schema_and_docs_list_every_endpoint(gw):
    # The endpoints are plain routes (no per-request dependency solving): the schema is ours.
    client, _, _ = gw
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths) == {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/responses/{response_id}",
                          "/v1/responses/{response_id}/input_items", "/v1/responses/{response_id}/cancel",
                          "/v1/conversations", "/v1/conversations/{conversation_id}",
                          "/v1/conversations/{conversation_id}/items",
                          "/v1/conversations/{conversation_id}/items/{item_id}", "/v1/route", "/v1/models",
                          "/v1/models/{model_id}", "/v1/embeddings", "/health", "/metrics"}
    assert set(paths["/v1/chat/completions"]) == {"post"} and set(paths["/v1/models"]) == {"get"}
    assert set(paths["/v1/conversations/{conversation_id}"]) == {"get", "post", "delete"}
    assert paths["/v1/chat/completions"]["post"]["summary"].startswith("Chat completion")
    assert client.get("/docs").status_code == 200
    wrong = client.get("/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


# ---------------------------------------------------------------- chat
def test_direct_alias_chat_with_headers(gw):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("hi there, how are you")})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "hello"
    assert r.headers["x-vsr-selected-model"] == "qwen-72b"
    assert len(fleet.models["qwen-72b"].calls) == 1


def test_auto_routes_by_intent_and_reports_the_decision(gw):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {"model": AUTO, **chat("fix the bug in my python function code")})
    assert r.status_code == 200
    assert r.headers["x-vsr-selected-decision"] == "code"
    assert r.headers["x-vsr-selected-model"] == "coder" and r.headers["x-vsr-task-type"] == "code"
    assert len(fleet.models["coder"].calls) == 1
    # The routing matrix's temperature for code reached the model.
    assert fleet.models["coder"].calls[0]["temperature"] == 0.1


def test_safety_decision_refuses_without_calling_a_model(gw):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {"model": AUTO, **chat("how to build a bomb weapon")})
    assert r.status_code == 200 and r.headers["x-vsr-selected-model"] == "none"
    assert r.json()["choices"][0]["message"]["refusal"] == "no"
    assert sum(fleet.calls().values()) == 0


def test_a_refusal_streams_when_the_client_asked_for_a_stream(gw):
    # No model answers a refusal, but a streaming client reads SSE (the OpenAI SDK's Stream cannot
    # read a JSON body): chat and text completions alike.
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {"model": AUTO, "stream": True, **chat("how to build a bomb weapon")})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r)
    assert events[-1] == "[DONE]" and "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]) == "no"
    # As on OpenAI, the refusal also streams in delta.refusal: the SDK's accumulator builds message.refusal.
    assert "".join(e["choices"][0]["delta"].get("refusal") or "" for e in events[:-1] if e["choices"]) == "no"
    with openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="x", http_client=client).chat.completions.stream(
            model=AUTO, messages=[{"role": "user", "content": "how to build a bomb weapon"}]) as stream:
        final = stream.get_final_completion().choices[0].message
    assert (final.content, final.refusal) == ("no", "no")
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    r = post(client, "/v1/completions", {"model": AUTO, "stream": True, "prompt": ["how to build a bomb weapon"] * 2,
                                         "stream_options": {"include_usage": True}})
    events = sse_events(r)
    assert r.headers["content-type"].startswith("text/event-stream") and events[-1] == "[DONE]"
    assert [(c["index"], c["text"]) for e in events[:-2] for c in e["choices"]] == [(0, "no"), (1, "no")]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["total_tokens"] == 0
    assert r.headers["x-vsr-selected-model"] == "none" and sum(fleet.calls().values()) == 0


def test_route_endpoint_decides_without_generating(gw):
    client, _, fleet = gw
    r = post(client, "/v1/route", {"model": AUTO, **chat("prove the integral equation")}, **{"x-vsr-debug": "true"})
    assert r.status_code == 200 and r.json()["decision"] == "reasoning"
    assert r.headers["x-vsr-selected-model"] == "r1-distill" and "x-vsr-matched-signals" in r.headers
    assert sum(fleet.calls().values()) == 0


def test_stream_is_sse_with_done_and_usage_only_when_asked(gw):
    client, _, _ = gw
    plain = post(client, "/v1/chat/completions", {"model": "qwen-72b", "stream": True, **chat("hello friend")})
    assert plain.status_code == 200 and plain.headers["content-type"].startswith("text/event-stream")
    events = sse_events(plain)
    assert events[-1] == "[DONE]"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c.get("choices"))
    assert text == "t0 t1 t2 "
    assert all("usage" not in c for c in events[:-1])


def test_fallback_when_the_first_model_fails_is_reported(tmp_path):
    with running_gateway(tmp_path / "intents", FakeModel("qwen-72b", mode="error")) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend")})
        assert r.status_code == 200
        assert r.headers["x-vsr-fallback"] == "qwen-72b:error,k2:ok"
        off = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend")},
                   **{"x-vsr-allow-fallback": "false"})
        assert off.status_code == 502 and off.json()["error"]["code"] == "upstream_error"


def test_fusion_plugin_runs_the_panel_and_reports_the_trace(gw):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", {
        "model": "vllm-sr/fusion", **chat("compare these"),
        "plugins": [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "coder"]}]})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-fusion-decision"] == "fusion_direct"
    assert r.headers["x-vsr-fusion-panel"] == "qwen-72b,coder" and r.headers["x-vsr-fusion-judge"] == "k2"
    assert r.json()["fusion"]["usable_responses"] == 2
    assert len(fleet.models["k2"].calls) == 2           # analysis + synthesis


def test_fusion_slug_without_a_decision_or_panel_is_the_exact_400(gw):
    client, _, _ = gw
    r = post(client, "/v1/chat/completions", {"model": "vllm-sr/fusion", **chat("compare these")})
    assert r.status_code == 400 and r.json()["error"]["code"] == "fusion_no_eligible_decision"


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("body, status, param", [
    ({"model": "qwen-72b", "messages": []}, 400, "messages"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": [{"type": "video"}]}]}, 400,
     "messages[0].content[0].type"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "temperature": 9}, 400, "temperature"),
    ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
    # OpenAI's requirements per role, which vLLM lets through (found on the embedded default).
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "42"}]},
     400, "messages[1].tool_call_id"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": None}]}, 400, "messages[0].content"),
    ({"model": "qwen-72b", "messages": [{"role": "system"}, {"role": "user", "content": "x"}]}, 400,
     "messages[0].content"),
    # JSON's true where a number belongs: pydantic read it as 1 (a one-token answer, one choice).
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "max_tokens": True}, 400, "max_tokens"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "n": True}, 400, "n"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "temperature": False}, 400, "temperature"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5}, 400, "max_tokens"),
    # OpenAI's logprobs bounds, checked before any model call (a simulated engine has none).
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
     400, "top_logprobs"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, 400, "top_logprobs"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}, 400, "logprobs"),
    ({"model": "vllm-sr/fusion", "messages": [{"role": "user", "content": "x"}],
      "plugins": [{"id": "fusion", "max_completion_tokens": True}]}, 400, "plugins[0].max_completion_tokens"),
])
def test_bad_input_is_an_openai_error_naming_the_parameter(gw, body, status, param):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", body)
    assert r.status_code == status and r.json()["error"]["param"] == param
    assert sum(fleet.calls().values()) == 0


def test_malformed_json_and_oversized_bodies(tmp_path):
    doc = gateway_profile(tmp_path / "intents", **{"global": {"server": {"max_request_body_bytes": 1000}}})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, _):
        bad = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        big = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("x" * 2000)})
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"


def test_a_compressed_body_is_a_415_naming_the_coding(gw):
    client, _, fleet = gw
    body = gzip.compress(json.dumps({"model": "qwen-72b", **chat("hi")}).encode())
    for path in ("/v1/chat/completions", "/v1/embeddings", "/v1/responses"):
        r = client.post(path, content=body, headers={"content-type": "application/json", "content-encoding": "gzip"})
        assert r.status_code == 415, path
        assert r.json()["error"]["code"] == "unsupported_content_encoding" and "'gzip'" in r.json()["error"]["message"]
    plain = client.post("/v1/chat/completions", content=json.dumps({"model": "qwen-72b", **chat("hi")}).encode(),
                        headers={"content-type": "application/json", "content-encoding": "identity"})
    assert plain.status_code == 200
    assert sum(fleet.calls().values()) == 1


def test_a_deeply_nested_body_is_a_400_before_any_model_is_called(tmp_path):
    # On Ray such a body failed to pickle on its way to the model, and that failure counted
    # against the model's breaker: six requests opened it for every caller (e2e: test_sim_ingress).
    doc = gateway_profile(tmp_path / "intents", **{"global": {"server": {"max_json_depth": 16}}})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, fleet):
        deep = '{"a":' * 16 + "1" + "}" * 16
        for path, head in (("/v1/chat/completions", '{"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]'),
                           ("/v1/completions", '{"model": "qwen-72b", "prompt": "hi"'),
                           ("/v1/embeddings", '{"model": "embed", "input": "hi"'),
                           ("/v1/route", '{"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]')):
            r = client.post(path, content=head + ', "metadata": ' + deep + "}",
                            headers={"content-type": "application/json"})
            assert r.status_code == 400, (path, r.text)
            assert r.json()["error"]["code"] == "invalid_json" and "16 levels" in r.json()["error"]["message"]
        assert sum(fleet.calls().values()) == 0
        ok = client.post("/v1/chat/completions", content='{"model": "qwen-72b", "messages": [{"role": "user", '
                         '"content": "hi"}], "metadata": ' + '{"a":' * 14 + "1" + "}" * 14 + "}",
                         headers={"content-type": "application/json"})
        assert ok.status_code == 200, ok.text


def test_the_nesting_limit_is_bounded_where_ray_can_still_pickle(tmp_path):
    from pydantic import ValidationError

    from serve_app.config.gateway import ServerSettings

    assert ServerSettings().max_json_depth == 64
    with pytest.raises(ValidationError, match="max_json_depth"):
        ServerSettings(max_json_depth=1000)


def test_before_routing_starts_slugs_are_503_but_aliases_and_404s_answer(tmp_path):
    with running_gateway(tmp_path / "intents", start_routing=False) as (client, _, _):
        slug = post(client, "/v1/chat/completions", {"model": AUTO, **chat("hello friend")})
        assert slug.status_code == 503 and int(slug.headers["retry-after"]) >= 1
        assert post(client, "/v1/chat/completions", {"model": "nope", **chat("x")}).status_code == 404
        assert post(client, "/v1/chat/completions", {"model": "k2", **chat("hello friend")}).status_code == 200
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "starting"


# ---------------------------------------------------------------- embeddings, health
def test_embeddings_float_and_base64(gw):
    client, _, _ = gw
    floats = post(client, "/v1/embeddings", {"model": "embed", "input": ["python code", "hello"],
                                             "encoding_format": "float"}).json()
    assert len(floats["data"]) == 2 and floats["usage"]["prompt_tokens"] > 0
    packed = post(client, "/v1/embeddings", {"model": "embed", "input": "python code",
                                             "encoding_format": "base64"}).json()
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert len(raw) == 4 * len(floats["data"][0]["embedding"])
    assert post(client, "/v1/embeddings", {"model": "qwen-72b", "input": "x"}).status_code == 404
    assert post(client, "/v1/embeddings", {"model": "embed", "input": [""]}).status_code == 400


@pytest.mark.parametrize("token_ids", [[9906, 1917], [[9906, 1917], [15339]]])
def test_embeddings_refuse_token_ids_saying_what_to_send(gw, token_ids):
    """LangChain's OpenAIEmbeddings sends tiktoken's ids unless told not to: the 400 says so."""
    client, _, _ = gw
    r = post(client, "/v1/embeddings", {"model": "embed", "input": token_ids})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input" and "check_embedding_ctx_length=False" in error["message"], error


def test_embeddings_dimensions_only_at_the_models_own_size(gw):
    client, _, _ = gw
    size = len(post(client, "/v1/embeddings", {"model": "embed", "input": "x"}).json()["data"][0]["embedding"])
    same = post(client, "/v1/embeddings", {"model": "embed", "input": "x", "dimensions": size})
    assert same.status_code == 200 and len(same.json()["data"][0]["embedding"]) == size
    shorter = post(client, "/v1/embeddings", {"model": "embed", "input": "x", "dimensions": 8})
    assert shorter.status_code == 400
    error = shorter.json()["error"]
    assert error["param"] == "dimensions" and f"returns {size}-dimensional" in error["message"]
    assert post(client, "/v1/embeddings", {"model": "embed", "input": "x", "dimensions": 0}).status_code == 400


def test_embeddings_dimensions_on_the_first_call_is_checked_against_the_answer(gw):
    client, _, _ = gw
    # Nothing embedded yet on this gateway: the size is learnt from this very answer.
    first = post(client, "/v1/embeddings", {"model": "embed", "input": "x", "dimensions": 3})
    assert first.status_code == 400 and first.json()["error"]["param"] == "dimensions"


def test_embeddings_refuse_a_text_over_the_models_limit_unless_truncation_is_asked(gw):
    """OpenAI and vLLM answer 400 for an input longer than the model embeds; vLLM's
    truncate_prompt_tokens asks for the cut instead (the fake counts a token per word + 2)."""
    client, _, _ = gw
    long = "word " * 600
    r = post(client, "/v1/embeddings", {"model": "embed", "input": ["short", long]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "input[1] has 602" in error["message"] and "at most 512" in error["message"]
    assert "truncate_prompt_tokens" in error["message"]
    single = post(client, "/v1/embeddings", {"model": "embed", "input": long}).json()["error"]
    assert "the input has 602" in single["message"]
    cut = post(client, "/v1/embeddings", {"model": "embed", "input": ["short", long],
                                          "truncate_prompt_tokens": -1})
    assert cut.status_code == 200 and len(cut.json()["data"]) == 2
    # usage counts the model's tokens of what was embedded: 3 + 512.
    assert cut.json()["usage"]["prompt_tokens"] == 3 + 512
    k = post(client, "/v1/embeddings", {"model": "embed", "input": long, "truncate_prompt_tokens": 10,
                                        "truncation_side": "left"})
    assert k.status_code == 200 and k.json()["usage"]["prompt_tokens"] == 10


def test_embeddings_take_at_most_2048_inputs_as_openai(gw):
    client, _, _ = gw
    assert post(client, "/v1/embeddings", {"model": "embed", "input": ["x"] * 2048}).status_code == 200
    r = post(client, "/v1/embeddings", {"model": "embed", "input": ["x"] * 2049})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input" and "at most 2048 inputs per request, got 2049" in error["message"]


@pytest.mark.parametrize("extra, param", [
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": 513}, "truncate_prompt_tokens"),   # over the model's max_length
    ({"truncation_side": "middle"}, "truncation_side"),
])
def test_embeddings_truncation_options_are_checked(gw, extra, param):
    client, _, _ = gw
    r = post(client, "/v1/embeddings", {"model": "embed", "input": "x", **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.json()


def test_health_is_ready_once_routing_works(gw):
    client, gateway, _ = gw
    body = client.get("/health").json()
    # No Serve controller here: deployments are unknown, not up, so the gateway is "starting".
    assert body["status"] == "starting" and "qwen-72b" in body["models"]
    from serve_app.fleet.availability import DeploymentState

    gateway.board.update({f"model-{a}": DeploymentState("HEALTHY", 1)
                          for a in ("k2", "qwen-72b", "r1-distill", "coder", "minicpm-v", "embed")})
    assert client.get("/health").json()["status"] == "ready"


# ---------------------------------------------------------------- auth and sessions
def test_api_keys_authenticate_authorise_and_filter_models(tmp_path):
    import hashlib

    key = "sk-test-123"
    doc = gateway_profile(tmp_path / "intents", auth={"enabled": True, "keys": [
        {"name": "team", "sha256": hashlib.sha256(key.encode()).hexdigest(), "allowed_models": ["qwen-72b"]}]})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, _):
        assert client.get("/v1/models").status_code == 401
        auth = {"authorization": f"Bearer {key}"}
        ids = [m["id"] for m in client.get("/v1/models", headers=auth).json()["data"]]
        assert "qwen-72b" in ids and "coder" not in ids
        ok = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("hi there friend")}, **auth)
        assert ok.status_code == 200
        denied = post(client, "/v1/chat/completions", {"model": "coder", **chat("hi there friend")}, **auth)
        assert denied.status_code == 403


def test_a_session_carries_history_into_the_next_turn(gw):
    client, _, fleet = gw
    for text in ("hello friend, my name is Ada", "what is my name, friend?"):
        r = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat(text)}, **{"X-Session-ID": "s1"})
        assert r.status_code == 200
    second = fleet.models["qwen-72b"].calls[-1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[0]["content"] == "hello friend, my name is Ada"


# ---------------------------------------------------------------- Fusion fan-out bounds
def _panel_request(members: list[str]) -> dict:
    return {"model": "vllm-sr/fusion", **chat("compare these"),
            "plugins": [{"id": "fusion", "model": "k2", "analysis_models": members}]}


@pytest.mark.parametrize("size", [9, 500])
def test_a_request_panel_over_the_default_maximum_is_a_400_naming_the_parameter(gw, size):
    client, _, fleet = gw
    r = post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"] * (size // 2) + ["k2"] * (size % 2)))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "plugins[0].analysis_models" and error["code"] == "fusion_panel_too_large"
    assert f"{size} models exceeds the maximum of 8" in error["message"]
    assert sum(fleet.calls().values()) == 0          # nothing fanned out
    # Eight is allowed: the bound is the configured maximum, not less.
    assert post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"] * 4)).status_code == 200


def test_the_maximum_panel_size_is_configured(tmp_path):
    doc = gateway_profile(tmp_path / "intents", **{"global": {"integrations": {"looper": {"fusion": {
        "model_names": ["vllm-sr/fusion"], "max_panel_size": 2}}}}})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, fleet):
        r = post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder", "r1-distill"]))
        assert r.status_code == 400 and r.json()["error"]["param"] == "plugins[0].analysis_models"
        assert post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"])).status_code == 200


def test_request_panels_need_the_keys_permission(tmp_path):
    import hashlib

    def sha(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    doc = gateway_profile(tmp_path / "intents", auth={"enabled": True, "keys": [
        {"name": "open", "sha256": sha("sk-open")},
        {"name": "fixed", "sha256": sha("sk-fixed"), "fusion_request_panels": False}]})
    # The operator's own Fusion decision (its panel is the profile's, not the request's).
    doc["routing"]["signals"]["keywords"] = {"fusion": {"keywords": ["fusion"]}}
    doc["routing"]["decisions"].append({
        "name": "panel", "priority": 85, "modelRefs": [{"model": "qwen-72b"}, {"model": "coder"}],
        "rules": {"operator": "AND", "conditions": [{"type": "keyword", "name": "fusion"}]},
        "algorithm": {"type": "fusion", "fusion": {"model": "k2"}}})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, fleet):
        denied = post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"]),
                      authorization="Bearer sk-fixed")
        assert denied.status_code == 403, denied.text
        assert denied.json()["error"]["param"] == "plugins[0].analysis_models"
        assert sum(fleet.calls().values()) == 0
        # The same key runs the profile's Fusion decision, and may tune it without a panel.
        tuned = {"model": "vllm-sr/fusion", **chat("fusion please: compare these"),
                 "plugins": [{"id": "fusion", "temperature": 0.2}]}
        ok = post(client, "/v1/chat/completions", tuned, authorization="Bearer sk-fixed")
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-vsr-fusion-decision"] == "panel"
        # A key with the permission (the default) may name its own panel.
        allowed = post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"]),
                       authorization="Bearer sk-open")
        assert allowed.status_code == 200, allowed.text


def test_fusion_turns_honour_the_session(gw):
    client, _, fleet = gw
    session = {"X-Session-ID": "fusion-s1"}
    first = post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"]) | {
        "messages": [{"role": "user", "content": "compare tabs and spaces, my name is Ada"}]}, **session)
    assert first.status_code == 200, first.text
    answer = first.json()["choices"][0]["message"]["content"]
    second = post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"]) | {
        "messages": [{"role": "user", "content": "and which one do I prefer?"}]}, **session)
    assert second.status_code == 200, second.text
    # Every panel member of the second run saw the first turn: question and synthesised answer.
    for alias in ("qwen-72b", "coder"):
        seen = fleet.models[alias].calls[-1]["messages"]
        texts = [m["content"] for m in seen if isinstance(m.get("content"), str)]
        assert "compare tabs and spaces, my name is Ada" in texts, seen
        assert answer in texts, seen
        assert texts[-1] == "and which one do I prefer?"
    # Without the header, a Fusion request stays stateless.
    post(client, "/v1/chat/completions", _panel_request(["qwen-72b", "coder"]) | {
        "messages": [{"role": "user", "content": "a fresh question"}]})
    assert [m["content"] for m in fleet.models["qwen-72b"].calls[-1]["messages"]] == ["a fresh question"]


# ---------------------------------------------------------------- shared state: Redis down
def test_redis_down_at_start_and_mid_run_answers_and_health_says_so(tmp_path, redis_servers, metrics):
    import hashlib
    import os

    from serve_app.fleet.availability import DeploymentState

    port = int(os.environ.get("HORIZON_TEST_REDIS_HEALTH_PORT", "6397"))
    if redis_servers.script("status", port).returncode == 0:
        redis_servers.script("stop", port)
    url = redis_servers.url(port)
    doc = gateway_profile(tmp_path / "intents",
                          sessions={"backend": "redis", "redis_url": url, "redis_timeout_s": 0.2},
                          auth={"enabled": True, "rate_limit_store": "redis", "keys": [
                              {"name": "team", "sha256": hashlib.sha256(b"sk-team").hexdigest(),
                               "requests_per_minute": 6, "burst": 3}]})
    key = {"authorization": "Bearer sk-team"}
    try:
        with running_gateway(tmp_path / "intents", doc=doc) as (client, gateway, fleet):
            gateway.board.update({f"model-{a}": DeploymentState("HEALTHY", 1)
                                  for a in ("k2", "qwen-72b", "r1-distill", "coder", "minicpm-v", "embed")})

            def turn(text: str):
                return post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat(text)},
                            **key, **{"X-Session-ID": "s-down"})

            # Unreachable from the start: answered without history, limited per replica.
            assert turn("hello friend, my name is Ada").status_code == 200
            assert turn("what is my name, friend?").status_code == 200
            assert [m["role"] for m in fleet.models["qwen-72b"].calls[-1]["messages"]] == ["user"]
            assert turn("third").status_code == 200
            limited = turn("fourth")                      # the local bucket still holds the burst
            assert limited.status_code == 429 and float(limited.headers["retry-after"]) > 0
            body = client.get("/health").json()
            assert body["status"] == "degraded"
            sessions, limits = body["shared_state"]["sessions"], body["shared_state"]["rate_limits"]
            assert sessions["reachable"] is False and sessions["meanwhile"] == "serving without history"
            assert "ConnectionError" in sessions["error"] and sessions["down_for_s"] >= 0
            assert limits["reachable"] is False and limits["meanwhile"] == "limiting per replica"
            assert metrics.value("horizon_session_store_errors", backend="redis", operation="history") >= 2
            assert metrics.total("horizon_rate_limit_store_errors") >= 4

            # Redis comes up: healthy again, history kept.
            assert redis_servers.script("start", port).returncode == 0
            body = client.get("/health").json()
            assert body["status"] == "ready", body["shared_state"]
            up = body["shared_state"]["sessions"]
            assert up["reachable"] is True and "error" not in up and up["url"] == url
            post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("remember me, friend")},
                 **key, **{"X-Session-ID": "s-up"})
            # Mid-run outage: still answered, and /health names what happened.
            assert redis_servers.script("stop", port).returncode == 0
            after = post(client, "/v1/chat/completions", {"model": "qwen-72b", **chat("still there?")},
                         **key, **{"X-Session-ID": "s-up"})
            assert after.status_code in (200, 429)
            down = client.get("/health").json()
            assert down["status"] == "degraded" and down["shared_state"]["sessions"]["reachable"] is False
    finally:
        redis_servers.script("stop", port)


def test_debug_answers_name_the_ingress_replica(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, gateway, _):
        gateway.replica = "replica-abc"
        # The middleware is installed when the app is built: build it again for this gateway.
        from fastapi.testclient import TestClient

        from serve_app.api.http import create_app

        with TestClient(create_app(gateway)) as tagged:
            ok = post(tagged, "/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend")},
                      **{"x-vsr-debug": "true"})
            assert ok.status_code == 200 and ok.headers["x-vsr-replica"] == "replica-abc"
            missing = post(tagged, "/v1/chat/completions", {"model": "nope", **chat("x")}, **{"x-vsr-debug": "true"})
            assert missing.status_code == 404 and missing.headers["x-vsr-replica"] == "replica-abc"
            plain = post(tagged, "/v1/chat/completions", {"model": "qwen-72b", **chat("hello friend")})
            assert "x-vsr-replica" not in plain.headers


def test_an_unknown_model_is_counted_as_a_404_request(gw, monkeypatch):
    """The 404 is answered before routing, and still reaches the request metric."""
    import serve_app.serving.gateway as gateway_module

    seen = []
    monkeypatch.setattr(gateway_module, "record_request",
                        lambda decision, model, status, *a, **k: seen.append((decision, model, status)))
    client, _, _ = gw
    assert post(client, "/v1/chat/completions", {"model": "gpt-17", **chat("x")}).status_code == 404
    assert post(client, "/v1/completions", {"model": "gpt-17", "prompt": "x"}).status_code == 404
    assert seen == [("error", "gpt-17", 404), ("error", "gpt-17", 404)]
