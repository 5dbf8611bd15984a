"""The ingress deployment: OpenAI-compatible HTTP in front of the chat service.

Thin by design: body limits, validation, request id, SSE framing and error bodies live here;
what to call and how is the :class:`serve_app.service.ChatService`'s business. Ray Serve's
proxy (or HAProxy in the fast mode) accepts or generates ``X-Request-ID`` and returns it; the
same id tags every Serve log line of the request, including lines logged by the model
deployments it calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from serve_app.config.loader import parse_config
from serve_app.errors import InvalidRequest, ModelNotFound, PayloadTooLarge

from .errors import error_response, install_error_handlers
from .protocol import ChatCompletionRequest, EmbeddingRequest, parse_model
from .sse import sse_stream

log = logging.getLogger("ray.serve")

app = FastAPI(title="K2 Horizon", description="OpenAI-compatible endpoint for a routed LLM fleet")
install_error_handlers(app)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing anything over ``limit`` bytes before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


@serve.deployment(name="ingress")
@serve.ingress(app)
class HorizonIngress:
    def __init__(self, config: dict[str, Any], handles: dict[str, Any]):
        from serve_app.model_handles import HandleFleet
        from serve_app.service import ChatService

        self.cfg = parse_config(config, source="ingress args")
        self.fleet = HandleFleet(self.cfg, handles)
        self.service = ChatService(self.cfg, self.fleet)
        self._handles = handles
        self._body_limit = self.cfg.global_.server.max_request_body_bytes
        self._started = time.time()

    # ------------------------------------------------------------------ chat
    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        raw = await read_body(request, self._body_limit)
        req = parse_model(ChatCompletionRequest, raw)
        debug = request.headers.get("x-vsr-debug", "").lower() == "true"
        outcome = await self.service.chat(req, debug=debug)
        if outcome.response is not None:
            return JSONResponse(outcome.response, headers=outcome.headers)
        chunks = outcome.chunks.__aiter__()
        # Wait for the first chunk before answering 200: a failure before any content is a
        # plain HTTP error (and could still fall back), not an error inside an SSE stream.
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            first = None
        headers = {**outcome.headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(sse_stream(first, chunks, include_usage=req.include_usage),
                                 media_type="text/event-stream", headers=headers)

    # ------------------------------------------------------------------ models
    @app.get("/v1/models")
    async def list_models(self):
        created = int(self._started)
        data = [{"id": m.alias, "object": "model", "created": created, "owned_by": "k2-horizon",
                 "role": m.role, "backend": m.backend} for m in self.cfg.models]
        data += [{"id": slug, "object": "model", "created": created, "owned_by": "k2-horizon",
                  "role": "router"} for slug in self.cfg.auto_slugs]
        data += [{"id": slug, "object": "model", "created": created, "owned_by": "k2-horizon",
                  "role": "fusion"} for slug in self.cfg.fusion_slugs]
        return {"object": "list", "data": data}

    # ------------------------------------------------------------------ embeddings
    @app.post("/v1/embeddings")
    async def embeddings(self, request: Request):
        raw = await read_body(request, self._body_limit)
        req = parse_model(EmbeddingRequest, raw)
        embedder = self.fleet.embedder
        model = self.cfg.embedding_model
        if model is None or embedder is None:
            raise ModelNotFound("this profile serves no embedding model", param="model")
        if req.model != model.alias:
            raise ModelNotFound(f"The embedding model {req.model!r} does not exist; use {model.alias!r}",
                                param="model")
        texts = req.texts
        if any(not isinstance(t, str) or not t for t in texts):
            raise InvalidRequest("every input must be a non-empty string", param="input")
        vectors = await embedder.embed(texts)
        tokens = sum(max(1, len(t) // 4) for t in texts)
        return {"object": "list", "model": model.alias,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    # ------------------------------------------------------------------ health
    @app.get("/health")
    async def health(self):
        models = {}
        statuses = await asyncio.to_thread(_deployment_statuses)
        for m in self.cfg.models:
            owner = m.shares_engine_with or m.alias
            st = statuses.get(owner, {"status": "UNKNOWN", "replicas": 0})
            models[m.alias] = {"role": m.role, "backend": m.backend, "deployment": owner, **st}
        for u in self.cfg.unavailable_models:
            models[u.alias] = {"role": u.role, "status": "NOT_SERVED", "reason": u.reason}
        served = [v for v in models.values() if v.get("status") != "NOT_SERVED"]
        healthy = all(v["status"] == "HEALTHY" for v in served)
        body = {"status": "ready" if healthy else "degraded", "profile": self.cfg.profile,
                "models": models}
        return JSONResponse(body, status_code=200 if healthy else 503)


def _deployment_statuses() -> dict[str, dict[str, Any]]:
    """Deployment status and running replicas per model deployment, from the Serve controller."""
    out: dict[str, dict[str, Any]] = {}
    try:
        status = serve.status()
    except Exception as exc:  # noqa: BLE001 — health must answer even if the controller is slow
        log.warning("serve.status() failed: %s", exc)
        return out
    for app_status in status.applications.values():
        for name, dep in app_status.deployments.items():
            alias = name.removeprefix("model-")
            running = sum(n for state, n in dep.replica_states.items() if str(state).endswith("RUNNING"))
            out[alias] = {"status": str(dep.status.value if hasattr(dep.status, "value") else dep.status),
                          "replicas": running}
    return out
