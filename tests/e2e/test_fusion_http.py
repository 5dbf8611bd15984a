"""Fusion end to end with the official ``openai`` client over real HTTP (issue 4).

The simulated profile's ``fusion_panel`` decision (keyword "fusion") runs qwen-72b, r1-distill
and coder as the panel and k2 as judge (``analysis_mode: separate``, ``on_error: skip``,
quorum 2, both visibility flags on). The simulated engine answers with a tool call whenever the
request carries ``tools``, which proves only the final judge call receives them.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI

pytestmark = pytest.mark.e2e

PANEL = ["qwen-72b", "r1-distill", "coder"]
FUSION_PROMPT = "Ask the panel of models: what are the trade-offs between Rust and Go for a web service?"
PLAIN_PROMPT = "hello there, how are you today?"
NO_ELIGIBLE_MESSAGE = ('no eligible Fusion decision matched for model "vllm-sr/fusion" and no request '
                       'plugins[].id=fusion analysis_models override was provided')
TOOLS = [{"type": "function", "function": {
    "name": "web_search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


@pytest.fixture(scope="module")
def client(serve_sim) -> OpenAI:
    return OpenAI(base_url=serve_sim.base_url, api_key="unused", max_retries=0, timeout=120)


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _fusion_body(resp) -> dict:
    return json.loads(resp.http_response.text)


def test_fusion_non_stream_has_full_trace_and_headers(client):
    resp = client.chat.completions.with_raw_response.create(model="vllm-sr/fusion", messages=_user(FUSION_PROMPT))
    completion = resp.parse()
    body = _fusion_body(resp)
    assert completion.model == "vllm-sr/fusion"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    # The judge (k2) writes the final answer.
    assert choice.message.content.startswith("[simulated k2]")

    trace = body["fusion"]
    assert trace["decision"] == "fusion_panel"
    assert trace["judge_model"] == "k2"
    assert trace["analysis_models"] == PANEL
    assert trace["analysis_mode"] == "separate"
    assert trace["prompt_version"] == "fusion-v1"
    assert [r["model"] for r in trace["responses"]] == PANEL
    assert all(r["status"] == "ok" and r["content"].startswith(f"[simulated {r['model']}]")
               for r in trace["responses"])
    assert trace["failed_models"] == []
    assert trace["usable_responses"] == 3
    # The simulated judge answers prose, not JSON: the analysis is kept raw, marked unparsed.
    assert trace["analysis"] is not None
    assert trace["analysis"].get("parse_failed") is True or "consensus" in trace["analysis"]
    # Panel attempts + judge calls (analysis + synthesis).
    assert trace["iterations"] == 3 + 2
    assert {"panel", "analysis", "synthesis", "total"} <= set(trace["timings_ms"])
    # Usage sums every successful sub-call, so it exceeds any single member's.
    member_out = [r["usage"]["completion_tokens"] for r in trace["responses"]]
    assert completion.usage.completion_tokens > max(member_out)

    h = resp.headers
    assert h["x-vsr-fusion-decision"] == "fusion_panel"
    assert h["x-vsr-fusion-judge"] == "k2"
    assert h["x-vsr-fusion-panel"] == ",".join(PANEL)
    assert h["x-vsr-fusion-mode"] == "separate"
    assert h["x-vsr-fusion-usable"] == "3"
    assert h["x-vsr-fusion-iterations"] == "5"
    assert float(h["x-vsr-fusion-ms"]) > 0
    assert h["x-vsr-selected-decision"] == "fusion_panel"


def test_auto_slug_runs_fusion_when_the_decision_says_so(client):
    resp = client.chat.completions.with_raw_response.create(model="vllm-sr/auto", messages=_user(FUSION_PROMPT))
    body = _fusion_body(resp)
    assert resp.headers["x-vsr-selected-decision"] == "fusion_panel"
    assert resp.headers["x-vsr-fusion-judge"] == "k2"
    assert body["fusion"]["analysis_models"] == PANEL
    assert body["model"] == "vllm-sr/auto"


def test_fusion_stream(client):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/fusion", messages=_user(FUSION_PROMPT), stream=True,
        stream_options={"include_usage": True})
    assert resp.headers["x-vsr-fusion-decision"] == "fusion_panel"
    assert resp.headers["content-type"].startswith("text/event-stream")
    chunks = list(resp.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[simulated k2]")
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_fusion_stream_ends_with_done(serve_sim):
    with httpx.stream("POST", f"{serve_sim.base_url}/chat/completions", timeout=120,
                      json={"model": "vllm-sr/fusion", "stream": True, "messages": _user(FUSION_PROMPT)}) as r:
        assert r.status_code == 200
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert all("error" not in json.loads(e[6:]) for e in events[:-1])


def test_plugin_override_runs_fusion_direct(client):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/fusion", messages=_user(PLAIN_PROMPT),
        extra_body={"plugins": [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "coder"]}]})
    completion = resp.parse()
    trace = _fusion_body(resp)["fusion"]
    assert trace["decision"] == "fusion_direct"
    assert trace["judge_model"] == "k2"
    assert trace["analysis_models"] == ["qwen-72b", "coder"]
    assert [r["model"] for r in trace["responses"]] == ["qwen-72b", "coder"]
    assert sorted(trace["request_overrides"]) == ["analysis_models", "model"]
    assert resp.headers["x-vsr-fusion-decision"] == "fusion_direct"
    assert resp.headers["x-vsr-fusion-panel"] == "qwen-72b,coder"
    assert completion.choices[0].message.content.startswith("[simulated k2]")


def test_plugin_override_replaces_the_decision_panel(client):
    """With a matching Fusion decision, the plugin overrides its judge and panel."""
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/fusion", messages=_user(FUSION_PROMPT),
        extra_body={"plugins": [{"id": "fusion", "model": "qwen-72b", "analysis_models": ["coder", "k2"],
                                 "analysis_mode": "one_call"}]})
    trace = _fusion_body(resp)["fusion"]
    assert trace["decision"] == "fusion_panel"
    assert trace["judge_model"] == "qwen-72b"
    assert trace["analysis_models"] == ["coder", "k2"]
    assert trace["analysis_mode"] == "one_call"
    assert trace["iterations"] == 2 + 1
    assert resp.parse().choices[0].message.content.startswith("[simulated qwen-72b]")


def test_tool_calls_non_stream(client):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/fusion", messages=_user(FUSION_PROMPT), tools=TOOLS, tool_choice="auto")
    completion = resp.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].type == "function"
    assert calls[0].function.name == "web_search"
    assert "query" in json.loads(calls[0].function.arguments)
    # Panel members never get the tools: they answered with text.
    trace = _fusion_body(resp)["fusion"]
    assert all(r["status"] == "ok" and r["content"] for r in trace["responses"])


def test_tool_calls_stream(client):
    stream = client.chat.completions.create(
        model="vllm-sr/fusion", messages=_user(FUSION_PROMPT), tools=TOOLS, stream=True)
    chunks = list(stream)
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas, "no tool-call deltas"
    assert deltas[0].id and deltas[0].function.name == "web_search"
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert "query" in json.loads(arguments)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


def test_no_eligible_decision_is_the_exact_400(client, serve_sim):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="vllm-sr/fusion", messages=_user(PLAIN_PROMPT))
    assert info.value.status_code == 400
    body = info.value.response.json()
    assert body["error"]["message"] == NO_ELIGIBLE_MESSAGE
    assert body["error"]["type"] == "invalid_request_error"
    assert body == {"error": {"message": NO_ELIGIBLE_MESSAGE, "type": "invalid_request_error",
                              "param": "model", "code": "fusion_no_eligible_decision"}}
    # Never a silent single-model fallback, streaming included.
    r = httpx.post(f"{serve_sim.base_url}/chat/completions", timeout=60,
                   json={"model": "vllm-sr/fusion", "stream": True, "messages": _user(PLAIN_PROMPT)})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == NO_ELIGIBLE_MESSAGE


def test_plugin_without_analysis_models_is_not_an_override(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="vllm-sr/fusion", messages=_user(PLAIN_PROMPT),
                                       extra_body={"plugins": [{"id": "fusion", "model": "k2"}]})
    assert info.value.response.json()["error"]["message"] == NO_ELIGIBLE_MESSAGE


@pytest.mark.parametrize("plugin,param", [
    ({"id": "fusion", "model": "k2", "analysis_models": ["vllm-sr/fusion", "qwen-72b"]},
     "plugins[0].analysis_models[0]"),
    ({"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "vllm-sr/auto"]},
     "plugins[0].analysis_models[1]"),
    ({"id": "fusion", "model": "vllm-sr/fusion", "analysis_models": ["qwen-72b", "coder"]},
     "plugins[0].model"),
])
def test_fusion_slug_as_panel_or_judge_is_rejected(client, plugin, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="vllm-sr/fusion", messages=_user(FUSION_PROMPT),
                                       extra_body={"plugins": [plugin]})
    err = info.value.response.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert "can never be a judge or panel model" in err["message"]
