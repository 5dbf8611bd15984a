"""An in-process fake of a running Horizon endpoint, served by uvicorn on 127.0.0.1.

The operator tools are HTTP clients, so they are tested over real HTTP. Each model of the fake
has a ``mode``:

ok          deterministic answers; over-long prompts get 400 context_length_exceeded
random      a different answer every call, even at temperature 0
no_context  no context check: an over-long prompt crashes the "engine" (500)
fragile     fails with 500 whenever another request is in flight (memory errors under load)
down        503 for everything
fallback    answered by another model (x-vsr-selected-model / x-vsr-fallback headers)
slow        answers after ``delay_s``

Auto routing (``vllm-sr/auto``) picks a task type by keywords and honours triggers in the user
text: GATEWAY -> 504, SLOW -> sleeps 2 s, FALLBACK -> x-vsr-fallback header, BADJSON -> a fenced
non-JSON answer to a JSON request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from serve_app.chat.context_length import estimate_prompt_tokens


@dataclass
class FakeModel:
    max_model_len: int = 512
    mode: str = "ok"
    delay_s: float = 0.0


@dataclass
class FakeEndpoint:
    models: dict[str, FakeModel]
    embedding_models: tuple[str, ...] = ("bge-m3",)
    # Words an embedding input may have; False: longer ones are cut silently (the old gateway).
    embedding_max_words: int = 512
    embedding_refuses_long_input: bool = True
    # Added to the vector's first component per call: an embedder whose answer wanders.
    embedding_drift: float = 0.0
    embedding_calls: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    requests: list[dict] = field(default_factory=list)
    url: str = ""

    def error(self, status: int, message: str, code: str, etype: str = "invalid_request_error"):
        return JSONResponse({"error": {"message": message, "type": etype, "param": None, "code": code}},
                            status_code=status)


def _completion(model: str, text: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "object": "chat.completion", "created": 0,
            "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def _user_text(body: dict) -> str:
    return " ".join(m.get("content") for m in body.get("messages", [])
                    if m.get("role") == "user" and isinstance(m.get("content"), str))


def _route(text: str) -> str:
    lowered = text.lower()
    if "def " in lowered or "function" in lowered:
        return "code"
    if "prove" in lowered or "solve" in lowered:
        return "reasoning"
    if "tl;dr" in lowered:
        return "summary"
    return "chat"


_TASK_MODEL = {"chat": "qwen-72b", "code": "coder", "reasoning": "r1-distill", "summary": "qwen-72b"}


def build_app(state: FakeEndpoint) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        state.requests.append(body)
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            await asyncio.sleep(0.01)  # let concurrent requests overlap
            if body["model"] == "vllm-sr/auto":
                return await _auto(state, body)
            return await _direct(state, body)
        finally:
            state.in_flight -= 1

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await request.json()
        if body.get("model") not in state.embedding_models:
            return state.error(404, "no such embedding model", "model_not_found")
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        if state.embedding_refuses_long_input and any(len(t.split()) > state.embedding_max_words for t in texts):
            return state.error(400, "input too long", "context_length_exceeded")
        state.embedding_calls += 1
        first = 0.6 + state.embedding_drift * state.embedding_calls
        return {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [first, 0.8]}
                                           for i, _ in enumerate(texts)]}

    return app


async def _direct(state: FakeEndpoint, body: dict):
    alias = body["model"]
    model = state.models.get(alias)
    if model is None:
        return state.error(404, f"model {alias!r} does not exist", "model_not_found")
    if model.mode == "down":
        return state.error(503, f"model {alias!r} is unavailable", "model_unavailable", "service_unavailable")
    prompt_tokens = estimate_prompt_tokens(body["messages"])
    if prompt_tokens + (body.get("max_tokens") or 1) > model.max_model_len:
        if model.mode == "no_context":
            return state.error(500, "engine crashed: CUDA out of memory", "server_error", "server_error")
        return state.error(400, f"maximum context length is {model.max_model_len}", "context_length_exceeded")
    if model.mode == "fragile" and state.in_flight > 1:
        return state.error(500, "engine failed under load", "server_error", "server_error")
    if model.delay_s:
        await asyncio.sleep(model.delay_s)
    digest = hashlib.sha256(json.dumps(body["messages"]).encode()).hexdigest()[:12]
    if model.mode == "random":
        digest = uuid.uuid4().hex[:12]
    headers = {"x-vsr-selected-model": alias}
    if model.mode == "fallback":
        headers = {"x-vsr-selected-model": "k2", "x-vsr-fallback": f"{alias}:error,k2:ok"}
    return JSONResponse(_completion(headers["x-vsr-selected-model"], f"[{alias}] answer {digest}"),
                        headers=headers)


async def _auto(state: FakeEndpoint, body: dict):
    text = _user_text(body)
    task = _route(text)
    headers = {"x-vsr-task-type": task, "x-vsr-selected-model": _TASK_MODEL[task],
               "x-vsr-selected-decision": task}
    if "GATEWAY" in text:
        return JSONResponse({"error": {"message": "timed out", "type": "timeout_error", "param": None,
                                       "code": "timeout"}}, status_code=504, headers=headers)
    if "SLOW" in text:
        await asyncio.sleep(2.0)
    if "FALLBACK" in text:
        headers["x-vsr-fallback"] = f"{_TASK_MODEL[task]}:timeout,k2:ok"
    if "PAUSE" in text:
        await asyncio.sleep(0.1)
    fmt = (body.get("response_format") or {}).get("type")
    if "BADJSON" in text:
        answer = "```json\n{\"answer\": \"cut"
    elif fmt in ("json_object", "json_schema") or "JSON" in text:
        answer = json.dumps({"answer": f"{task} answer"})
    else:
        answer = f"a {task} answer"
    return JSONResponse(_completion(_TASK_MODEL[task], answer), headers=headers)


class ServerThread:
    """uvicorn serving ``app`` on 127.0.0.1 (a free port) in a daemon thread."""

    def __init__(self, app: FastAPI):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("fake endpoint did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(state: FakeEndpoint) -> ServerThread:
    return ServerThread(build_app(state))


PROFILE_YAML = """
profile: smoke-test
models:
  - {alias: k2, role: coordinator, backend: simulated, engine: {model: fake/k2, max_model_len: 1024}}
  - {alias: qwen-72b, role: chat, backend: simulated, engine: {model: fake/qwen, max_model_len: 512}}
  - {alias: coder, role: code, backend: simulated, engine: {model: fake/coder, max_model_len: 512}}
  - {alias: r1-distill, role: reasoning, backend: simulated, engine: {model: fake/r1, max_model_len: 512}}
  - alias: bge-m3
    role: embedding
    backend: embedding
    engine: {model: fake/bge, max_model_len: 512}
routing:
  default_decision: chat
  decisions:
    - {name: chat, modelRefs: [{model: qwen-72b}]}
"""


def fleet(**modes: str) -> dict[str, FakeModel]:
    """The profile's chat models, all ``ok`` unless a mode is given (keys use _ for -)."""
    lens = {"k2": 1024, "qwen-72b": 512, "coder": 512, "r1-distill": 512}
    modes = {k.replace("_", "-"): v for k, v in modes.items()}
    return {alias: FakeModel(max_model_len=n, mode=modes.get(alias, "ok")) for alias, n in lens.items()}
