"""Ingress behaviour over real HTTP against the simulated fleet on Ray Serve."""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(serve_sim) -> OpenAI:
    return OpenAI(base_url=serve_sim.base_url, api_key="unused", max_retries=0, timeout=60)


def test_direct_alias_non_stream(client):
    resp = client.chat.completions.with_raw_response.create(
        model="qwen-72b", messages=[{"role": "user", "content": "What is the capital of France?"}])
    body = resp.parse()
    assert body.choices[0].message.content.startswith("[simulated qwen-72b]")
    assert body.usage.completion_tokens > 0
    assert resp.headers["x-vsr-selected-model"] == "qwen-72b"
    assert resp.headers["x-request-id"]


def test_request_id_is_echoed(serve_sim):
    r = httpx.post(f"{serve_sim.base_url}/chat/completions", headers={"X-Request-ID": "req-abc-123"},
                   json={"model": "coder", "messages": [{"role": "user", "content": "hi"}]}, timeout=60)
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "req-abc-123"


def test_stream_has_incremental_chunks_and_usage(client):
    stream = client.chat.completions.create(
        model="coder", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Write a function that reverses a string in Python."}])
    chunks = list(stream)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) >= 3
    assert "".join(texts).startswith("[simulated coder]")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(texts) or chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].choices == []


def test_stream_without_usage_sends_no_usage(client):
    stream = client.chat.completions.create(
        model="coder", stream=True, messages=[{"role": "user", "content": "hello there"}])
    assert all(c.usage is None for c in stream)


def test_models_lists_aliases_and_slugs(client):
    ids = {m.id for m in client.models.list().data}
    assert {"k2", "qwen-72b", "r1-distill", "coder", "minicpm-v", "bge-m3"} <= ids
    assert {"vllm-sr/auto", "auto", "MoM", "vllm-sr/fusion"} <= ids


@pytest.mark.parametrize("body,param", [
    ({"model": "qwen-72b"}, "messages"),
    ({"model": "qwen-72b", "messages": []}, "messages"),
    ({"model": "qwen-72b", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages[0].content[0].type"),
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}], "max_tokens": -5}, "max_tokens"),
    ({"model": "qwen-72b", "messages": "hello"}, "messages"),
    ({"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model"),
])
def test_bad_input_gets_openai_400_naming_the_param(serve_sim, body, param):
    r = httpx.post(f"{serve_sim.base_url}/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert set(err) >= {"message", "type", "param", "code"}


def test_malformed_json_is_400(serve_sim):
    r = httpx.post(f"{serve_sim.base_url}/chat/completions", content=b'{"model": "qwen-72b", "messages": [',
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"


def test_unknown_model_is_404(serve_sim):
    r = httpx.post(f"{serve_sim.base_url}/chat/completions",
                   json={"model": "gpt-17", "messages": [{"role": "user", "content": "x"}]}, timeout=30)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


def test_oversized_body_is_413(serve_sim):
    big = "x" * (10 * 1024 * 1024 + 10)
    r = httpx.post(f"{serve_sim.base_url}/chat/completions",
                   json={"model": "qwen-72b", "messages": [{"role": "user", "content": big}]}, timeout=60)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


def test_a_deeply_nested_body_is_a_400_and_leaves_the_models_breaker_closed(serve_sim):
    """Nested 600 deep, a body failed to pickle on its way to the model, and the failure counted
    against k2's breaker: six such requests opened it for every caller (and its fallbacks'). Now
    the ingress refuses it at parse (global.server.max_json_depth, 64)."""
    def k2_answers() -> None:
        ok = httpx.post(f"{serve_sim.base_url}/chat/completions", timeout=60,
                        json={"model": "k2", "messages": [{"role": "user", "content": "hi"}]})
        assert ok.status_code == 200 and ok.headers["x-vsr-selected-model"] == "k2", ok.text

    k2_answers()                        # a success first: no failure in a row before the test
    deep = '{"a":' * 600 + "1" + "}" * 600
    body = '{"model": "k2", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + deep + "}"
    for _ in range(6):
        r = httpx.post(f"{serve_sim.base_url}/chat/completions", content=body,
                       headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_json"
    k2 = httpx.get(f"{serve_sim.url}/health", timeout=30).json()["models"]["k2"]
    assert k2["breaker_state"] == "closed" and k2["breaker"]["consecutive_failures"] == 0
    k2_answers()


def test_embeddings_are_normalised(client):
    out = client.embeddings.create(model="bge-m3", input=["routing vector", "another one"])
    assert len(out.data) == 2
    norm = sum(x * x for x in out.data[0].embedding) ** 0.5
    assert abs(norm - 1.0) < 1e-3


def test_a_long_embeddings_list_goes_to_the_batch_queue_in_pieces(client, serve_sim):
    """The router's calls share the embedder with /v1/embeddings: a long list is handed over
    embedding.endpoint_chunk_texts (64) texts at a time, so a routing call that arrives
    meanwhile joins the next piece's batch instead of waiting behind the whole list."""
    import ray

    @ray.remote(num_cpus=0)
    class InfoProbe:   # fast-mode handles need the caller's event loop: an async actor's
        async def info(self, app: str) -> dict:
            from ray import serve

            return await serve.get_deployment_handle("model-bge-m3", app_name=app).info.remote()

    probe = InfoProbe.remote()
    try:
        before = ray.get(probe.info.remote(serve_sim.name), timeout=60)
        out = client.embeddings.create(model="bge-m3", input=[f"text number {i}" for i in range(200)])
        after = ray.get(probe.info.remote(serve_sim.name), timeout=60)
    finally:
        ray.kill(probe)
    assert len(out.data) == 200 and [d.index for d in out.data] == list(range(200))
    assert after["texts"] - before["texts"] >= 200
    assert after["batches"] - before["batches"] >= 4          # ceil(200 / 64) pieces at least


def test_messages_over_grpcs_default_cap_pass_between_deployments(client):
    """The fast mode calls deployments over gRPC, capped at 4 MiB by default: a 5 MB image (the
    gateway takes up to 6 MB decoded) came back as a 502 "could not read this image", the
    cause being a bare RESOURCE_EXHAUSTED between the ingress and the model. The environment
    horizon serve runs with raises the cap (local_cluster.FAST_MODE_ENV)."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 255, (1300, 1300, 3), dtype=np.uint8)
    Image.fromarray(noise).save(buf, format="PNG")            # incompressible: ≈ 5 MB
    assert 4.5e6 < len(buf.getvalue()) < 6e6
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    out = client.chat.completions.create(model="minicpm-v", max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": url}}]}])
    assert out.choices[0].message.content.startswith("[simulated minicpm-v]")


def test_health_reports_every_model(serve_sim):
    body = httpx.get(f"{serve_sim.url}/health", timeout=30).json()
    assert body["status"] == "ready"
    for alias in ("k2", "qwen-72b", "r1-distill", "coder", "minicpm-v", "bge-m3"):
        assert body["models"][alias]["status"] == "HEALTHY"
        assert body["models"][alias]["replicas"] >= 1


def test_the_boards_cheap_read_agrees_with_serve_status(serve_sim):
    """The ingress reads deployment states from the controller's details dict, not through
    serve.status() (which cloudpickles every deployment's router and policy on the way): both
    must say the same of the running application. The two reads are moments apart, so a
    deployment changing state in between (another test's redeploy settling) is read again."""
    import time

    from ray import serve

    from serve_app.fleet.availability import read_serve_status

    def from_serve_status() -> dict[str, tuple[str, int]]:
        deployments = serve.status().applications["sim"].deployments
        return {name: (str(getattr(dep.status, "value", dep.status)),
                       sum(n for s, n in dep.replica_states.items()
                           if str(getattr(s, "value", s)) == "RUNNING"))
                for name, dep in deployments.items()}

    for _ in range(20):
        expected = from_serve_status()
        got = {name: (st.status, st.running) for name, st in read_serve_status("sim").items()}
        if got == expected:
            break
        time.sleep(1)
    assert got == expected
    assert set(got) >= {"ingress", "model-k2", "model-qwen-72b", "model-bge-m3"}
    assert got["ingress"][1] >= 1          # the replica that serves this suite is running


def test_structured_paths_on_the_simulated_fleet(client):
    """Load and fault tests can drive the structured paths: schema-valid JSON, schema-valid
    tool arguments, n choices and text completions, over the socket."""
    import json

    import jsonschema

    schema = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
              "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
    resp = client.chat.completions.with_raw_response.create(
        model="qwen-72b", n=2, messages=[{"role": "user", "content": "Plan a trip."}],
        response_format={"type": "json_schema", "json_schema": {"name": "trip", "schema": schema}})
    body = resp.parse()
    assert len(body.choices) == 2 and resp.headers["x-vsr-structured-output"] == "valid"
    for choice in body.choices:
        jsonschema.validate(json.loads(choice.message.content), schema)
    tool = {"type": "function", "function": {"name": "book", "parameters": schema}}
    called = client.chat.completions.create(model="coder", tools=[tool], tool_choice="required",
                                            messages=[{"role": "user", "content": "Book it."}])
    call = called.choices[0].message.tool_calls[0]
    assert call.function.name == "book"
    jsonschema.validate(json.loads(call.function.arguments), schema)
    text = client.completions.create(model="k2", prompt="Once upon a time", max_tokens=5)
    assert text.object == "text_completion" and text.choices[0].text.strip()
