"""End to end on the embedded CPU default: a real vLLM engine (SmolLM2-135M-Instruct via
ray.serve.llm) and the real MiniLM through FlagEmbedding, called over HTTP with the official
openai client."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(serve_local) -> OpenAI:
    return OpenAI(base_url=serve_local.base_url, api_key="unused", max_retries=0, timeout=180)


def test_chat_non_stream_real_model(client):
    resp = client.chat.completions.with_raw_response.create(
        model="qwen-72b", max_tokens=16, temperature=0,
        messages=[{"role": "user", "content": "Name a colour."}])
    body = resp.parse()
    assert body.choices[0].message.content.strip()
    assert not body.choices[0].message.content.startswith("[simulated")
    assert body.usage.prompt_tokens > 0 and 0 < body.usage.completion_tokens <= 16
    assert resp.headers["x-vsr-selected-model"] == "qwen-72b"


def test_chat_stream_real_model(client):
    stream = client.chat.completions.create(
        model="k2", max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Count from one to five."}])
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3, "several incremental chunks"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12 or chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].choices == []


def test_auto_routes_through_decision(client):
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/auto", max_tokens=8, messages=[{"role": "user", "content": "hello there!"}])
    assert resp.parse().choices[0].message.content is not None
    assert resp.headers["x-vsr-selected-decision"]
    assert resp.headers["x-vsr-selected-model"] in {"k2", "qwen-72b", "r1-distill", "coder"}


def test_models_and_embeddings(client):
    ids = {m.id for m in client.models.list().data}
    assert {"k2", "qwen-72b", "r1-distill", "coder", "bge-m3", "vllm-sr/auto", "vllm-sr/fusion"} <= ids
    out = client.embeddings.create(model="bge-m3", input=["a cat sat on the mat", "a kitten on a rug",
                                                          "quarterly tax filing"])
    a, b, c = (d.embedding for d in out.data)
    dot = lambda x, y: sum(p * q for p, q in zip(x, y))  # noqa: E731
    assert len(a) == 384
    assert dot(a, b) > dot(a, c), "real embeddings put related sentences closer"


def test_unknown_model_404(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["code"] == "model_not_found"


def test_malformed_body_400(serve_local):
    r = httpx.post(f"{serve_local.base_url}/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_image_request_names_missing_vision_model(serve_local):
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(buf, format="PNG")
    png = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=60, json={
        "model": "vllm-sr/auto",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                                  {"type": "image_url", "image_url": {"url": png}}]}]})
    assert r.status_code in (400, 503)
    assert "minicpm-v" in r.json()["error"]["message"]
