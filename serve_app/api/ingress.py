"""The ingress deployment: OpenAI-compatible HTTP in front of the chat service.

Thin by design: body limits, validation, request id, SSE framing and error bodies live here;
what to call and how is the :class:`serve_app.service.ChatService`'s business. Ray Serve's
proxy (or HAProxy in the fast mode) accepts or generates ``X-Request-ID`` and returns it; the
same id tags every Serve log line of the request, including lines logged by the model
deployments it calls.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from ray import serve

from serve_app.config.loader import parse_config
from serve_app.fleet.names import deployment_name
from serve_app.errors import (HorizonError, InvalidRequest, ModelNotFound, ModelUnavailable, PayloadTooLarge,
                              UpstreamTimeout)
from serve_app.fleet.availability import DeploymentBoard, read_serve_status
from serve_app.observability.node_metrics import fetch_node_metrics

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


def _breaker_store(cfg):
    """Breaker state shared by all ingress replicas (a named Ray actor)."""
    from serve_app.resilience.breaker_ray import RayBreakerStore

    return RayBreakerStore.connect(cfg.resilience.breaker)


def _app_name() -> Optional[str]:
    try:
        return serve.get_replica_context().app_name
    except Exception:  # noqa: BLE001 — outside a replica (tests): every application
        return None


@serve.deployment(name="ingress")
@serve.ingress(app)
class HorizonIngress:
    async def __init__(self, config: dict[str, Any], handles: dict[str, Any]):
        from serve_app.auth.keys import ApiKeyAuthenticator
        from serve_app.fusion.looper import FusionLooper
        from serve_app.model_handles import HandleFleet
        from serve_app.observability.logging import configure_logging
        from serve_app.observability.metrics import configure_metrics
        from serve_app.resilience.fallback import ResilientFleet
        from serve_app.service import ChatService
        from serve_app.sessions.store import build_session_store

        self.cfg = parse_config(config, source="ingress args")
        configure_logging(self.cfg.observability, log_payloads=self.cfg.global_.server.log_payloads)
        configure_metrics(self.cfg.observability)
        # Deployment states from Serve's controller: a call to a deployment with no replica
        # fails at once with its reason instead of waiting in Serve's queue (and /health says why).
        self.board = DeploymentBoard(functools.partial(read_serve_status, _app_name()),
                                     retry_after_s=max(1, self.cfg.global_.server.retry_after_s))
        self.board.start()
        self.handle_fleet = HandleFleet(self.cfg, handles, board=self.board)
        self.fleet = ResilientFleet(self.handle_fleet, self.cfg, breaker_store=_breaker_store(self.cfg))
        self.sessions = build_session_store(self.cfg.sessions) if self.cfg.sessions.enabled else None
        self.service = ChatService(self.cfg, self.fleet, router=None, fusion=FusionLooper(self.fleet),
                                   sessions=self.sessions)
        self.auth = ApiKeyAuthenticator(self.cfg.auth)
        self._body_limit = self.cfg.global_.server.max_request_body_bytes
        self._started = time.time()
        self._startup_error: str | None = None
        # Routing needs the embedding deployment (intent templates are embedded once); start it
        # in the background so /health can say "starting" instead of the replica hanging.
        # (async __init__: the task runs on the replica's own event loop.)
        self._startup = asyncio.create_task(self._start_routing())

    async def _start_routing(self) -> None:
        """Embed the intent templates (through the embedding deployment) and install the router.

        While the embedding deployment is not up yet (or answers too slowly), the reason is kept
        for ``/health`` and the start is retried; any other failure is final and reported."""
        from serve_app.routing.router import Router

        classifier_alias = self.cfg.routing.signals.intent.classifier.model
        while True:
            try:
                classifier = (self.fleet.client(classifier_alias, task_type="unknown")
                              if classifier_alias in self.cfg.aliases else None)
                router = Router(self.cfg, self.handle_fleet.embedder, classifier)
                await router.start()
                self.service.router = router
                self._startup_error = None
                log.info("routing ready: %d decisions", len(self.cfg.routing.decisions))
                return
            except (ModelUnavailable, UpstreamTimeout) as exc:
                self._startup_error = f"routing waits for the embedding model: {exc.message}"
                await asyncio.sleep(2.0)
            except Exception as exc:  # noqa: BLE001 — reported on /health, retried by redeploy
                self._startup_error = f"{type(exc).__name__}: {exc}"
                log.exception("routing failed to start")
                return

    @property
    def ready(self) -> bool:
        return self.service.router is not None

    def _not_ready(self) -> ModelUnavailable:
        why = self._startup_error or "the router is still starting (waiting for the embedding model)"
        return ModelUnavailable(f"K2 Horizon is not ready: {why}", retry_after=self.cfg.global_.server.retry_after_s or 1)

    async def _principal(self, request: Request):
        principal = self.auth.authenticate(request.headers.get("authorization"))
        # Awaited: with auth.rate_limit_store: redis the bucket is a Redis round trip.
        await self.auth.check_rate(principal)
        return principal

    # ------------------------------------------------------------------ chat
    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        from serve_app.observability.metrics import record_request
        from serve_app.sessions.ids import scoped_session_id, session_id_from_headers

        started = time.perf_counter()
        principal = await self._principal(request)
        raw = await read_body(request, self._body_limit)
        req = parse_model(ChatCompletionRequest, raw)
        # An unknown model is a 404 in every state; routing is needed only by the slugs.
        if self.service.resolve(req.model).kind != "model" and not self.ready:
            raise self._not_ready()
        debug = request.headers.get("x-vsr-debug", "").lower() == "true"
        allow_fallback = request.headers.get("x-vsr-allow-fallback", "true").lower() != "false"

        def authorize(model, decision, fusion):
            self.auth.authorize(principal, model=model, decision=decision, fusion=fusion)

        try:
            outcome = await self.service.chat(
                req, debug=debug, authorize=authorize, fallback_ok=allow_fallback,
                session_id=scoped_session_id(session_id_from_headers(request.headers, self.cfg.sessions),
                                             None if principal.anonymous else principal.name))
        except HorizonError as exc:
            record_request("error", req.model, exc.status, time.perf_counter() - started)
            raise
        if outcome.response is not None:
            usage = outcome.response.get("usage") or {}
            record_request(outcome.decision, outcome.model, 200, time.perf_counter() - started,
                           tokens_in=usage.get("prompt_tokens", 0), tokens_out=usage.get("completion_tokens", 0))
            return JSONResponse(outcome.response, headers=outcome.headers)
        chunks = outcome.chunks.__aiter__()
        # The first chunk is already in hand (the service waited for it): a failure before any
        # content was a plain HTTP error above, never an error inside an SSE stream.
        first = await chunks.__anext__()
        elapsed = time.perf_counter() - started
        record_request(outcome.decision, outcome.model, 200, elapsed, ttft_s=elapsed)
        headers = {**outcome.headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(sse_stream(first, chunks, include_usage=req.include_usage),
                                 media_type="text/event-stream", headers=headers)

    @app.post("/v1/route")
    async def route(self, request: Request):
        """The routing decision for a chat request, without generating."""
        await self._principal(request)
        raw = await read_body(request, self._body_limit)
        req = parse_model(ChatCompletionRequest, raw)
        if not self.ready:
            raise self._not_ready()
        target = self.service.resolve(req.model)
        result = await self.service.router.route(req.engine_body(), fusion_only=target.kind == "fusion")
        if result is None:
            from serve_app.fusion.policy import no_eligible_decision_error

            raise no_eligible_decision_error(req.model)
        debug = request.headers.get("x-vsr-debug", "").lower() == "true"
        return JSONResponse(result.to_dict(), headers=result.headers(debug))

    # ------------------------------------------------------------------ models
    @app.get("/v1/models")
    async def list_models(self, request: Request):
        """The models this caller may use (with API keys on, what its key allows)."""
        principal = await self._principal(request)
        created = int(self._started)
        data = [{"id": m.alias, "object": "model", "created": created, "owned_by": "k2-horizon",
                 "role": m.role, "backend": m.backend}
                for m in self.cfg.models if principal.may_use_model(m.alias)]
        if principal.may_route:
            data += [{"id": slug, "object": "model", "created": created, "owned_by": "k2-horizon",
                      "role": "router"} for slug in self.cfg.auto_slugs]
        if principal.fusion_allowed:
            data += [{"id": slug, "object": "model", "created": created, "owned_by": "k2-horizon",
                      "role": "fusion"} for slug in self.cfg.fusion_slugs]
        return {"object": "list", "data": data}

    # ------------------------------------------------------------------ embeddings
    @app.post("/v1/embeddings")
    async def embeddings(self, request: Request):
        principal = await self._principal(request)
        raw = await read_body(request, self._body_limit)
        req = parse_model(EmbeddingRequest, raw)
        embedder = self.fleet.embedder
        model = self.cfg.embedding_model
        if model is None or embedder is None:
            raise ModelNotFound("this profile serves no embedding model", param="model")
        if req.model != model.alias:
            raise ModelNotFound(f"The embedding model {req.model!r} does not exist; use {model.alias!r}",
                                param="model")
        self.auth.authorize(principal, model=model.alias, decision=None, fusion=False)
        texts = req.texts
        if any(not isinstance(t, str) or not t for t in texts):
            raise InvalidRequest("every input must be a non-empty string", param="input")
        vectors = await embedder.embed(texts)
        tokens = sum(max(1, len(t) // 4) for t in texts)
        if req.encoding_format == "base64":
            import base64

            import numpy as np

            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        return {"object": "list", "model": model.alias,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    # ------------------------------------------------------------------ health
    @app.get("/health")
    async def health(self):
        """starting → ready / degraded, with per-model deployment status, replicas, Serve's reason
        when a deployment is not up, and the ingress's view of each model (breaker state, queue,
        latency, success rate)."""
        if not self.board.states:
            await self.board.refresh()
        states = self.board.states
        guarded = self.fleet.health()
        models = {}
        for m in self.cfg.models:
            owner = m.shares_engine_with or m.alias
            st = states.get(deployment_name(owner))
            st_dict = st.as_dict() if st is not None else {"status": "UNKNOWN", "replicas": 0}
            models[m.alias] = {"role": m.role, "backend": m.backend, "deployment": owner, **st_dict,
                               **guarded.get(m.alias, {})}
        for u in self.cfg.unavailable_models:
            models[u.alias] = {"role": u.role, "status": "NOT_SERVED", "reason": u.reason}
        served = [v for v in models.values() if v.get("status") != "NOT_SERVED"]
        healthy = all(v["status"] == "HEALTHY" and v.get("breaker_state", "closed") == "closed"
                      for v in served)
        # "starting" until routing works and every deployment has been up once; afterwards a
        # deployment that is down makes the gateway "degraded" (it still serves the others).
        not_started = sorted({v["deployment"] for v in served
                              if not self.board.started(deployment_name(v["deployment"]))})
        if not self.ready or not_started:
            state = "starting"
        else:
            state = "ready" if healthy else "degraded"
        body = {"status": state, "profile": self.cfg.profile, "models": models}
        if not_started:
            body["waiting_for"] = [deployment_name(d) for d in not_started]
        if self._startup_error:
            body["error"] = self._startup_error
        headers = {"Retry-After": "2"} if state == "starting" else {}
        return JSONResponse(body, status_code=503 if state == "starting" else 200, headers=headers)

    # ------------------------------------------------------------------ metrics
    @app.get("/metrics")
    async def metrics(self):
        """Prometheus text of this node's Ray metrics agent: Horizon's series (``ray_horizon_*``),
        Serve's, vLLM's and Ray's. On a cluster, scrape every node's agent port instead."""
        text = await fetch_node_metrics()
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
