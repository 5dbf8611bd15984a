"""Semantic routing over real HTTP against the simulated fleet (issue 3).

Every routed request (``vllm-sr/auto`` and the other auto slugs) carries the ``x-vsr-*``
decision headers; matched signals only with ``x-vsr-debug: true``; ``POST /v1/route`` answers
the decision without generating; odd input gets a decision or a clean 400, never a 5xx.
"""

from __future__ import annotations

import json

import httpx
import pytest
from openai import OpenAI

pytestmark = pytest.mark.e2e

ROUTING_HEADERS = ("x-vsr-selected-decision", "x-vsr-selected-model", "x-vsr-task-type",
                   "x-vsr-confidence", "x-vsr-routing-ms")

# (prompt, decision, model, task type): one per task type the brief names, taken from the
# labelled evaluation set (configs/eval/e2e_eval.jsonl).
CASES = [
    ("Write a Python function that checks whether a string is a palindrome.",
     "code", "coder", "code"),
    ("If all bloops are razzies and all razzies are lazzies, are all bloops lazzies? Explain step by step.",
     "reasoning", "r1-distill", "reasoning"),
    ("How do I politely decline a meeting invitation from a colleague?",
     "general_chat", "qwen-72b", "chat"),
    ("Summarize the following in two sentences: The city council met on Tuesday to discuss the new "
     "park. Residents raised concerns about parking, noise and the cost of maintenance. The council "
     "agreed to hold a public consultation next month before any decision is made.",
     "summary", "qwen-72b", "summary"),
]


@pytest.fixture(scope="module")
def client(serve_sim) -> OpenAI:
    return OpenAI(base_url=serve_sim.base_url, api_key="unused", max_retries=0, timeout=60)


def _chat(serve_sim, content, *, model="vllm-sr/auto", headers=None, **extra) -> httpx.Response:
    return httpx.post(f"{serve_sim.base_url}/chat/completions", headers=headers or {}, timeout=60,
                      json={"model": model, "messages": [{"role": "user", "content": content}], **extra})


def _assert_routing_headers(headers, decision, model, task_type):
    for name in ROUTING_HEADERS:
        assert name in headers, f"missing {name}: {dict(headers)}"
    assert headers["x-vsr-selected-decision"] == decision
    assert headers["x-vsr-selected-model"] == model
    assert headers["x-vsr-task-type"] == task_type
    confidence = float(headers["x-vsr-confidence"])
    assert 0.0 <= confidence <= 1.0
    assert float(headers["x-vsr-routing-ms"]) >= 0.0


@pytest.mark.parametrize("prompt,decision,model,task_type", CASES, ids=[c[3] for c in CASES])
def test_auto_routes_by_task_type_with_headers(client, prompt, decision, model, task_type):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/auto", messages=[{"role": "user", "content": prompt}])
    body = resp.parse()
    _assert_routing_headers(resp.headers, decision, model, task_type)
    # The chosen model really answered (the simulated engine names itself).
    assert body.choices[0].message.content.startswith(f"[simulated {model}]")
    assert "x-vsr-matched-signals" not in resp.headers
    assert "x-vsr-fallback" not in resp.headers


@pytest.mark.parametrize("slug", ["auto", "MoM"])
def test_every_auto_slug_routes(serve_sim, slug):
    prompt, decision, model, task_type = CASES[0]
    r = _chat(serve_sim, prompt, model=slug)
    assert r.status_code == 200, r.text
    _assert_routing_headers(r.headers, decision, model, task_type)


def test_stream_carries_routing_headers(serve_sim):
    prompt, decision, model, task_type = CASES[0]
    with httpx.stream("POST", f"{serve_sim.base_url}/chat/completions", timeout=60,
                      json={"model": "vllm-sr/auto", "stream": True,
                            "messages": [{"role": "user", "content": prompt}]}) as r:
        assert r.status_code == 200
        _assert_routing_headers(r.headers, decision, model, task_type)
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"


def test_direct_alias_bypasses_decisions(serve_sim):
    """A fleet alias is not routed: no decision header, the named model answers."""
    r = _chat(serve_sim, CASES[0][0], model="qwen-72b")
    assert r.status_code == 200
    assert r.headers["x-vsr-selected-model"] == "qwen-72b"
    assert "x-vsr-selected-decision" not in r.headers


def test_matched_signals_only_with_debug_header(serve_sim):
    prompt = CASES[0][0]
    plain = _chat(serve_sim, prompt)
    assert plain.status_code == 200
    assert "x-vsr-matched-signals" not in plain.headers
    off = _chat(serve_sim, prompt, headers={"x-vsr-debug": "false"})
    assert "x-vsr-matched-signals" not in off.headers

    debug = _chat(serve_sim, prompt, headers={"x-vsr-debug": "true"})
    assert debug.status_code == 200
    signals = debug.headers["x-vsr-matched-signals"]
    entries = dict(item.split("=", 1) for item in signals.split(","))
    # "type:name=confidence": the code intent and the code-feature rule both fired.
    assert "intent:code" in entries, signals
    assert all(0.0 <= float(v) <= 1.0 for v in entries.values())
    assert debug.headers["x-vsr-escalated"] in ("true", "false")
    _assert_routing_headers(debug.headers, "code", "coder", "code")


@pytest.mark.parametrize("prompt,decision,model,task_type", CASES, ids=[c[3] for c in CASES])
def test_route_endpoint_decides_without_generating(serve_sim, prompt, decision, model, task_type):
    r = httpx.post(f"{serve_sim.base_url}/route", timeout=60, headers={"x-vsr-debug": "true"},
                   json={"model": "vllm-sr/auto", "messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["decision"] == decision
    assert body["model"] == model
    assert body["task_type"] == task_type
    assert body["algorithm"] == "static"
    assert 0.0 <= body["confidence"] <= 1.0
    assert any(s["type"] == "intent" for s in body["signals"])
    assert body["routing_ms"] >= 0
    # A decision, not a completion.
    assert "choices" not in body and "usage" not in body
    _assert_routing_headers(r.headers, decision, model, task_type)
    assert "x-vsr-matched-signals" in r.headers


def test_route_endpoint_does_not_call_the_model(serve_sim):
    """/v1/route leaves the engines alone: the chosen model's call count does not move."""
    def coder_calls() -> int:
        return httpx.get(f"{serve_sim.url}/health", timeout=30).json()["models"]["coder"]["requests_total"]

    before = coder_calls()
    for _ in range(5):
        r = httpx.post(f"{serve_sim.base_url}/route", timeout=60,
                       json={"model": "vllm-sr/auto", "messages": [{"role": "user", "content": CASES[0][0]}]})
        assert r.status_code == 200
        assert r.json()["model"] == "coder"
    assert coder_calls() == before


def test_route_endpoint_fusion_slug(serve_sim):
    ok = httpx.post(f"{serve_sim.base_url}/route", timeout=60, json={
        "model": "vllm-sr/fusion", "messages": [{"role": "user", "content": "fusion: compare Rust and Go"}]})
    assert ok.status_code == 200, ok.text
    assert ok.json()["decision"] == "fusion_panel"
    assert ok.json()["algorithm"] == "fusion"
    none = httpx.post(f"{serve_sim.base_url}/route", timeout=60, json={
        "model": "vllm-sr/fusion", "messages": [{"role": "user", "content": "hello there"}]})
    assert none.status_code == 400
    assert none.json()["error"]["code"] == "fusion_no_eligible_decision"


BAD_INPUTS = {
    "empty_text": [{"role": "user", "content": ""}],
    "whitespace_text": [{"role": "user", "content": "   \n\t "}],
    "emoji": [{"role": "user", "content": "🤔🔥🚀💯😂 ??? 🎉🎉"}],
    "mixed_scripts": [{"role": "user", "content": "Привет, 你好, مرحبا — how are you? こんにちは"}],
    "long_100k": [{"role": "user", "content": ("The quick brown fox jumps over the lazy dog. " * 2300)[:100_000]}],
    "image_only": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
               "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}]}],
    "no_user_message": [{"role": "system", "content": "You are terse."}],
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
@pytest.mark.parametrize("endpoint", ["route", "chat/completions"])
def test_bad_input_gets_a_decision_or_clean_400(serve_sim, name, endpoint):
    r = httpx.post(f"{serve_sim.base_url}/{endpoint}", timeout=120,
                   json={"model": "vllm-sr/auto", "messages": BAD_INPUTS[name]})
    assert r.status_code < 500, r.text
    assert r.status_code in (200, 400), r.text
    assert "Traceback" not in r.text
    if r.status_code == 400:
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"]
        return
    assert r.headers["x-vsr-selected-decision"]
    assert r.headers["x-vsr-task-type"]
    if endpoint == "route":
        assert r.json()["decision"] == r.headers["x-vsr-selected-decision"]


def test_long_prompt_context_signal_sees_the_real_length(serve_sim):
    """100 000 characters (~25 000 tokens) are truncated for embedding, but the
    context-length signal still measures the whole prompt (the medium bucket)."""
    text = ("Explain how the water cycle works. " * 3000)[:100_000]
    r = httpx.post(f"{serve_sim.base_url}/route", timeout=120,
                   json={"model": "vllm-sr/auto", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    ctx = [s for s in r.json()["signals"] if s["type"] == "context_length"]
    assert [s["name"] for s in ctx] == ["medium"], r.json()["signals"]


def test_invalid_utf8_escape_is_a_400_naming_it(serve_sim):
    """A lone surrogate from an invalid \\u escape in the JSON body is not text: vLLM's tokenizer
    failed on it (a 502 counted against the model's breaker), so the ingress refuses it."""
    raw = ('{"model": "vllm-sr/auto", "messages": [{"role": "user", "content": '
           '"broken \\ud800 escape, what is 2+2?"}]}').encode()
    for endpoint in ("route", "chat/completions"):
        r = httpx.post(f"{serve_sim.base_url}/{endpoint}", content=raw, timeout=60,
                       headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text
        error = json.loads(r.text)["error"]
        assert error["code"] == "invalid_json" and "surrogate" in error["message"]
