"""End to end on the embedded CPU default: a real vLLM engine (SmolLM2-135M-Instruct via
ray.serve.llm) and the real MiniLM through FlagEmbedding, called over HTTP with the official
openai client."""

from __future__ import annotations

import json
import socket
import time
from typing import Callable

import httpx
import openai
import pytest
from openai import OpenAI

from conftest import serve_log_lines

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
    assert len(client.embeddings.create(model="bge-m3", input="a", dimensions=384).data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="bge-m3", input="a", dimensions=8)
    assert err.value.body["param"] == "dimensions" and "384-dimensional" in err.value.body["message"]


def test_an_embedding_input_over_the_models_limit_is_a_400_unless_truncation_is_asked(client):
    """The real MiniLM takes 512 tokens a pass. A longer text used to be cut silently (a vector
    of its start only, in the caller's index without a sign); now it is OpenAI's and vLLM's
    400, and vLLM's truncate_prompt_tokens asks for the cut, counted in the model's tokens."""
    long = "The committee reviewed the quarterly figures in detail. " * 80   # ≈ 800 tokens
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="bge-m3", input=["a short one", long])
    body = err.value.body
    assert body["code"] == "context_length_exceeded" and body["param"] == "input", body
    assert "input[1] has" in body["message"] and "at most 512" in body["message"], body
    cut = client.embeddings.create(model="bge-m3", input=["a short one", long],
                                   extra_body={"truncate_prompt_tokens": -1})
    assert len(cut.data) == 2 and len(cut.data[1].embedding) == 384
    # "a short one" is 3 word pieces + [CLS] and [SEP]; the long text is cut to 512.
    assert cut.usage.prompt_tokens == 5 + 512
    start = client.embeddings.create(model="bge-m3", input=long, extra_body={"truncate_prompt_tokens": 16})
    assert start.usage.prompt_tokens == 16
    dot = sum(p * q for p, q in zip(start.data[0].embedding, cut.data[1].embedding))
    assert 0.5 < dot < 0.9999, dot   # the same start, a different length: close, not equal


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


def test_json_schema_constrained_by_real_engine(serve_local):
    """vLLM's own structured-output support constrains the tiny model's decoding: the answer
    parses and matches the schema as generated (no repair, no corrective retry)."""
    import json

    import jsonschema

    schema = {"type": "object", "additionalProperties": False, "required": ["colour", "bright"],
              "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]},
                             "bright": {"type": "boolean"}}}
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=180, json={
        "model": "qwen-72b", "temperature": 0, "max_tokens": 40,
        "messages": [{"role": "user", "content": "Pick a colour of the sky and say if it is bright."}],
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "sky", "schema": schema, "strict": True}}})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "qwen-72b"
    body = r.json()
    value = json.loads(body["choices"][0]["message"]["content"])
    jsonschema.validate(value, schema)
    # Constrained decoding: the first answer was valid as generated (never repaired for a
    # vLLM engine, and no corrective retry was needed).
    assert r.headers["x-vsr-structured-output"] == "valid"


def test_json_schema_invalid_schema_400(serve_local):
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=60, json={
        "model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "bad", "schema": {"type": "no-such-type"}}}})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "response_format.json_schema.schema"


def test_a_schema_the_engine_cannot_compile_fails_the_request_not_the_models_breaker(serve_local):
    """xgrammar refuses ``minProperties`` above what the schema allows, inside vLLM's engine: a
    500 for that request (vLLM's GenerationError) while the engine serves the next one. Counted
    against the breaker, six of them opened k2's for every caller (found probing this profile)."""
    url = f"{serve_local.base_url}/chat/completions"
    hi = {"model": "k2", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(url, json=hi, timeout=120).status_code == 200     # no failure in a row before
    schema = {"type": "json_schema", "json_schema": {"name": "many", "schema": {"type": "object",
                                                                               "minProperties": 1000}}}
    for _ in range(6):
        r = httpx.post(url, json={**hi, "response_format": schema}, timeout=120)
        assert r.status_code == 502, r.text
        assert "failed on this request" in r.json()["error"]["message"]
    k2 = httpx.get(f"{serve_local.url}/health", timeout=30).json()["models"]["k2"]
    assert k2["breaker_state"] == "closed" and k2["breaker"]["consecutive_failures"] == 0
    ok = httpx.post(url, json=hi, timeout=120)
    assert ok.status_code == 200 and ok.headers["x-vsr-selected-model"] == "k2", ok.text


FUSION_PANEL_OF_2 = [{"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "coder"]}]


def test_fusion_json_schema_is_decoded_under_the_judges_grammar(serve_local):
    """Fusion's synthesis decodes under the judge engine's grammar: before, the judge was only
    told the schema, and SmolLM2 rambled past the JSON until max_tokens (200 "truncated", by
    hand: prose quoting the panel)."""
    import jsonschema

    schema = {"type": "object", "additionalProperties": False, "required": ["answer"],
              "properties": {"answer": {"type": "integer"}}}
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=180, json={
        "model": "vllm-sr/fusion", "temperature": 0, "max_tokens": 48, "plugins": FUSION_PANEL_OF_2,
        "messages": [{"role": "user", "content": "What is 2+2?"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "sum", "schema": schema}}})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-structured-output"] == "valid"
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), schema)


def test_a_short_fusion_answer_limit_leaves_the_judges_analysis_its_room(serve_local):
    """A client's max_tokens bounds the answer (panel and synthesis), not the judge's JSON
    analysis: the README's example (max_tokens 48) had its analysis cut at 48 tokens, and the
    synthesis copied the 135M judge's "1.1.1" fragment as the answer."""
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=300, json={
        "model": "vllm-sr/fusion", "temperature": 0, "max_tokens": 16, "plugins": FUSION_PANEL_OF_2,
        "messages": [{"role": "user", "content": "Give one tip for writing clear Python code."}]})
    assert r.status_code == 200, r.text
    trace = r.json()["fusion"]
    analysis_call, synthesis_call = trace["judge_calls"]
    assert [c["stage"] for c in trace["judge_calls"]] == ["analysis", "synthesis"]
    assert analysis_call["usage"]["completion_tokens"] > 16
    assert synthesis_call["usage"]["completion_tokens"] <= 16
    assert all(m["usage"]["completion_tokens"] <= 16 for m in trace["responses"])
    if trace["analysis"].get("cut"):  # the judge ran out of room: its fragment is not the answer
        fragment = trace["analysis"]["raw"].strip()[-12:]
        assert fragment not in r.json()["choices"][0]["message"]["content"]


def test_the_profiles_analysis_penalty_lets_the_greedy_tiny_judge_close_its_json(serve_local):
    """At temperature 0 the 135M judge repeats "1." inside its JSON strings until its 384
    tokens, so the analysis is cut and dropped (a plugin override of 0 shows it, by hand: 384
    tokens, cut). configs/local.yaml gives k2 a fusion_judge analysis_frequency_penalty of 0.5
    for that call alone, and the analysis closes with its five keys."""
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=300, json={
        "model": "vllm-sr/fusion", "temperature": 0, "max_tokens": 16,
        "messages": [{"role": "user", "content": "Ask the panel of models: give one tip for "
                                                 "writing clear Python code."}]})
    assert r.status_code == 200, r.text
    trace = r.json()["fusion"]
    assert trace["decision"] == "fusion_panel" and trace["request_overrides"] == []
    analysis, synthesis = trace["judge_calls"]
    assert trace["analysis"].get("cut") is not True, trace["analysis"]
    assert {"consensus", "contradictions", "partial_coverage", "unique_insights",
            "blind_spots"} <= set(trace["analysis"])
    assert analysis["usage"]["completion_tokens"] < 384 and synthesis["usage"]["completion_tokens"] <= 16
    # k2's default reached the analysis call alone; the synthesis kept the request's sampling.
    assert analysis["sampling"] == {"temperature": 0, "max_tokens": 384, "frequency_penalty": 0.5}
    assert synthesis["sampling"] == {"temperature": 0, "max_tokens": 16}


def test_a_fusion_request_every_member_refuses_is_the_engines_400(serve_local):
    """max_completion_tokens past the window: vLLM refuses it in each panel member, so the answer
    is vLLM's 400 naming the parameter, not a 502 'quorum not met' that clients retry."""
    r = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=60, json={
        "model": "vllm-sr/fusion", "max_completion_tokens": 10 ** 9, "plugins": FUSION_PANEL_OF_2,
        "messages": [{"role": "user", "content": "What is 2+2?"}]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and "max_model_len=2048" in error["message"]
    assert {f["model"] for f in error["details"]["fusion"]["failed_models"]} == {"qwen-72b", "coder"}


@pytest.fixture(scope="module")
def engine_stats(serve_local) -> Callable[[], dict]:
    """What the vLLM replica reports to Serve's autoscaler (the scheduler's running and waiting
    counts, read from the engine at the moment of the call), called the way Serve's metrics
    loop does, from an actor's event loop (fast-mode handles run their router on the caller's
    loop, which must outlive them)."""
    import ray

    @ray.remote(num_cpus=0)
    class StatsProbe:
        async def stats(self) -> dict:
            from ray import serve

            handle = serve.get_deployment_handle("model-k2", app_name="local")
            return await handle.record_autoscaling_stats.remote()

    probe = StatsProbe.remote()
    ray.get(probe.stats.remote(), timeout=60)
    yield lambda: ray.get(probe.stats.remote(), timeout=30)
    ray.kill(probe)


def test_engine_reports_waiting_and_running_to_the_autoscaler(client, engine_stats):
    """The vLLM replica's record_autoscaling_stats carries the scheduler's counts and the
    gateway's backlog: with several requests at once the engine runs several, and under more
    concurrent requests than max_num_seqs (16) what exceeds its slots waits in the gateway's
    admission line (issue 16: the line admits as many as the engine has slots) and reaches the
    application's demand board, which the replica relays as gateway_waiting; idle, all are zero.

    This probe is a handle call, and Serve hands the replica no more than its slots
    (``scaling_options``): while all 16 are busy it waits for a free slot, so it can only read
    the engine when requests are finishing. The running count is therefore read under fewer
    requests than slots (a CI run under load read 0 and 1 while 24 ran), and the backlog from
    the board itself. Serve's own autoscaler calls the hook inside the replica and never waits
    for a slot."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import ray

    from deployments.gateway_demand import GATEWAY_WAITING
    from serve_app.app_scoped import NAMESPACE, state_actor_name
    from serve_app.autoscaling.signals import ENGINE_RUNNING, ENGINE_WAITING

    def ask(i: int, max_tokens: int) -> None:
        client.chat.completions.create(model="k2", max_tokens=max_tokens, temperature=0,
                                       messages=[{"role": "user", "content": f"Tell a story number {i}."}])

    # Running: 12 requests, under the 16 slots, of 24 tokens each (long enough to be read while
    # they run; with 48 tokens, 24 answers once took over the model's 180 s deadline on a loaded
    # 2-core CI machine).
    seen: list[dict] = []
    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(ask, i, 24) for i in range(12)]
        while not all(f.done() for f in futures):
            seen.append(engine_stats())
            time.sleep(0.2)
        for f in futures:
            f.result()
    assert max(s.get(ENGINE_RUNNING, 0) for s in seen) >= 2, seen

    # Waiting in the gateway's line: 24 requests, over the 16 slots.
    board = ray.get_actor(state_actor_name("local"), namespace=NAMESPACE)
    backlog: list[float] = []
    done = threading.Event()

    def watch_board() -> None:
        while not done.is_set():
            backlog.append(ray.get(board.waiting.remote("model-k2"), timeout=30))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch_board, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(24) as pool:
            for f in [pool.submit(ask, i, 8) for i in range(24)]:
                f.result()
    finally:
        done.set()
        watcher.join(timeout=30)
    assert max(backlog, default=0.0) >= 1, backlog
    # The replica relays the board's figure (the key is there) and, idle, every count is zero.
    # The board holds an ingress replica's last report until the next one, and a report it
    # did not get counts for REPORT_MAX_AGE_S: a loaded CI machine once read the line's last
    # backlog (8.0) right after the answers, so idle is read once that lifetime can have passed.
    from deployments.gateway_demand import PUBLISH_INTERVAL_S, REPORT_MAX_AGE_S

    def counts(stats: dict) -> tuple:
        return stats[ENGINE_WAITING], stats[ENGINE_RUNNING], stats.get(GATEWAY_WAITING)

    deadline = time.monotonic() + REPORT_MAX_AGE_S + 2 * PUBLISH_INTERVAL_S
    idle = engine_stats()
    while counts(idle) != (0.0, 0.0, 0.0) and time.monotonic() < deadline:
        time.sleep(PUBLISH_INTERVAL_S)
        idle = engine_stats()
    assert GATEWAY_WAITING in idle, idle
    assert counts(idle) == (0.0, 0.0, 0.0), idle


def _engine_running_until(engine_stats: Callable[[], dict], done: Callable[[float], bool],
                          timeout_s: float) -> list[float]:
    """The engine's running-request count, polled until ``done(count)`` or the time-out."""
    from serve_app.autoscaling.signals import ENGINE_RUNNING

    seen: list[float] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen.append(engine_stats().get(ENGINE_RUNNING, 0.0))
        if done(seen[-1]):
            break
        time.sleep(0.2)
    return seen


FUSION_PANEL_OF_3 = {"model": "vllm-sr/fusion", "plugins": [
    {"id": "fusion", "model": "k2", "analysis_models": ["qwen-72b", "r1-distill", "coder"]}]}


@pytest.mark.parametrize("kind", ["non-stream", "stream", "fusion"])
def test_a_client_that_disconnects_stops_the_engine(serve_local, engine_stats, kind):
    """A client that gives up (a client-side time-out, Ctrl-C, a chat UI's stop button) frees
    the engine at once: HAProxy passes the close to the gateway, the gateway cancels the model
    call (a Fusion request: its whole panel, three requests on this one engine) and vLLM aborts.
    Each request asks for 1,500 tokens with ``ignore_eos``, a minute of this engine's time, and
    is sent as the OpenAI SDK (httpx) sends one: headers and body in two writes. With Serve's
    HAProxy splicing request bodies, a non-streaming request sent that way never learnt of the
    close and generated all 1,500 tokens for nobody
    (serve_app.tools.local_cluster.haproxy_without_splice)."""
    assert _engine_running_until(engine_stats, lambda n: n == 0, 120)[-1] == 0, "engine busy before the test"
    url = httpx.URL(serve_local.base_url)
    stream = kind == "stream"
    request = {"model": "k2", "stream": stream, "max_tokens": 1500, "ignore_eos": True,
               "temperature": 1.0, "messages": [{"role": "user", "content": "Tell a very long story."}]}
    if kind == "fusion":
        request.update(FUSION_PANEL_OF_3)
    running_when_started = 3 if kind == "fusion" else 1
    body = json.dumps(request).encode()
    head = (f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock = socket.create_connection((url.host, url.port), timeout=30)
    try:
        sock.sendall(head)
        time.sleep(0.05)  # the body arrives in a read of its own, as the SDK's usually does
        sock.sendall(body)
        started = _engine_running_until(engine_stats, lambda n: n >= running_when_started, 60)
        assert started[-1] >= running_when_started, f"the request never reached the engine: {started}"
        if stream:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200"), "no streamed answer began"
    finally:
        sock.close()
    closed_at = time.monotonic()
    after = _engine_running_until(engine_stats, lambda n: n == 0, 15)
    assert after[-1] == 0, (f"the engine still ran the request {time.monotonic() - closed_at:.1f} s "
                            f"after its client closed: {after}")


def test_classifier_calls_on_the_real_engine_all_answer_a_label(serve_local):
    """The k2 classifier's answer is constrained by vLLM's structured outputs: even SmolLM2-135M,
    which never produced parseable JSON unconstrained, answers every time with one of the labels.
    32 different texts (two waves of the engine's 16 slots; 50 took 166 s of a 2-core machine)."""
    import asyncio
    import json
    from pathlib import Path

    from serve_app.config.routing import IntentClassifierSettings
    from serve_app.routing.signals.classifier import LLMIntentClassifier

    root = Path(__file__).resolve().parents[2]
    prompt = (root / "configs" / "intents" / "classifier_prompt.txt").read_text()
    classifier = LLMIntentClassifier(client=None, settings=IntentClassifierSettings(), prompt=prompt)
    items = [json.loads(line) for line in (root / "configs" / "eval" / "routing_eval.jsonl").open()]
    texts = [m["messages"][-1]["content"] for m in items if isinstance(m["messages"][-1]["content"], str)][:32]

    async def ask(client: httpx.AsyncClient, slots: asyncio.Semaphore, text: str) -> str:
        body = {"model": "k2", **classifier._request(text)}
        async with slots:
            r = await client.post(f"{serve_local.base_url}/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"]

    async def all_of_them() -> list[str]:
        # As many at once as the engine has slots (max_num_seqs: 16), as a router sends them:
        # what is proven is the constraint on every answer, not the gateway's queueing (with
        # fifty at once, a loaded 2-core CI machine once answered one with HAProxy's plain
        # 500, which replaces 502/503/504 from its side; not reproduced since).
        slots = asyncio.Semaphore(16)
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(ask(client, slots, t) for t in texts))

    answers = asyncio.run(all_of_them())
    labels = [classifier._parse(a)[0] for a in answers]      # raises on any unparseable answer
    assert len(labels) == 32 == len(set(texts))
    assert set(labels) <= {"chat", "reasoning", "code", "vision", "summary", "safety", "unknown"}


def test_the_vllm_replicas_log_holds_each_call_under_the_request_id(serve_local):
    """vLLM's engine start closes every log handler of its process (its dictConfig), Serve's
    replica log included: the vLLM replica's log stopped at its first line and kept every later
    record in memory. Its calls are now in its file, under the client's request id, and so are
    vLLM's lines."""
    import uuid

    rid = f"vllm-log-{uuid.uuid4().hex[:10]}"
    k2_logs = f"replica_{serve_local.name}_model-k2_*.log"
    answer = httpx.post(f"{serve_local.base_url}/chat/completions", timeout=120, headers={"X-Request-ID": rid},
                        json={"model": "k2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert answer.status_code == 200
    lines = serve_log_lines(k2_logs, rid, within_s=10)
    assert lines and "CALL chat_body OK" in lines[0], lines
    # vLLM's own lines, its engine start's included, are records of the replica's log at their
    # level, not its stdout ("(MainProcess pid=…) WARNING …") logged as INFO by Serve.
    assert [line.split()[0] for line in serve_log_lines(k2_logs, "Resolved architecture")] == ["INFO"]
    assert serve_log_lines(k2_logs, "(MainProcess pid=") == []


# ---------------------------------------------------------- the engine process killed outright
def _engine_core(app: str, deployment: str = "model-k2"):
    """The vLLM engine-core process of ``app``'s replica of ``deployment``: a child of the
    replica's process, which Ray titles ``ray::ServeReplica:<app>:<deployment>``."""
    import psutil

    title = f"ray::ServeReplica:{app}:{deployment}"
    replicas = [p for p in psutil.process_iter(["cmdline"])
                if " ".join(p.info.get("cmdline") or []).strip() == title]
    assert len(replicas) == 1, replicas
    cores = [p for p in replicas[0].children(recursive=True)
             if "VLLM::EngineCore" in p.name() or "VLLM::EngineCore" in " ".join(p.cmdline())]
    assert len(cores) == 1, cores
    return cores[0]


def test_an_engine_killed_outright_is_replaced_and_the_gateway_says_so_meanwhile(serve_local, client):
    """SIGKILL to vLLM's engine core, as the kernel's OOM killer would send it. Until Serve's
    health check has replaced the replica, a request to the model gets a 503 naming it, with
    Retry-After, in seconds; the embedder keeps answering; then the model answers again. Last
    in this module: it waits for the new engine, so the modules after it find one."""
    chat = {"model": "k2", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
    core = _engine_core(serve_local.name)
    core.kill()
    core.wait(10)
    killed = time.monotonic()
    refusals: list[tuple[float, float, str]] = []   # (s after the kill, s the answer took, code)
    while True:
        sent = time.monotonic()
        answer = httpx.post(f"{serve_local.base_url}/chat/completions", json=chat, timeout=240)
        if answer.status_code == 200:
            break
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] in ("model_unavailable", "circuit_open") and "k2" in error["message"], error
        assert int(answer.headers["retry-after"]) >= 1
        refusals.append((round(sent - killed, 1), round(time.monotonic() - sent, 1), error["code"]))
        if len(refusals) == 1:
            # The other models' deployments are untouched.
            vectors = client.embeddings.create(model="bge-m3", input=["still answering"])
            assert len(vectors.data[0].embedding) > 0
        assert time.monotonic() - killed < 300, f"k2 still refused 5 minutes after the kill: {refusals}"
        time.sleep(2)
    recovered = time.monotonic() - killed
    print(f"503s (s after the kill, s taken, code): {refusals}; answering again {recovered:.0f} s after the kill")
    assert refusals, "the request right after the kill was answered: the engine was not the one killed"
    assert all(took < 15 for _, took, _ in refusals), refusals
    assert answer.json()["choices"][0]["message"]["content"]
    assert _engine_core(serve_local.name).pid != core.pid
    # vLLM's own account is in the old replica's log at its level: a warning, not the INFO line
    # Serve's stdout redirect made of it.
    said = serve_log_lines(f"replica_{serve_local.name}_model-k2_*.log", "engine core exited unexpectedly")
    assert said and all(line.startswith("WARNING ") for line in said), said
