"""The chat service: one request in, one answer (or chunk stream) out — no HTTP here.

Order of work for one request:
  resolve ``model`` (fleet alias, auto slug, Fusion slug) → check images → route (signals and
  decisions; a fleet alias bypasses them) → authorise → session history for the task type →
  algorithm: a refusal, a static model call through resilience (breaker, queue, timeouts,
  fallback chain), or Fusion (panel → judge → synthesis, each sub-call guarded) → record the
  session turn. The ``x-vsr-*`` facts gathered on the way become response headers.

The ingress is a thin HTTP adapter around it, so every behaviour here is testable with
in-process fakes of the fleet.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Optional

from serve_app.api.protocol import ChatCompletionRequest
from serve_app.config.schema import HorizonConfig
from serve_app.errors import HorizonError, InvalidRequest, ModelNotFound, ModelUnavailable
from serve_app.fleet.backends import backend
from serve_app.messages.view import has_image

log = logging.getLogger("ray.serve")

# Fleet role → the task type whose fallback chain and priority a direct alias request uses.
ROLE_TASK_TYPE = {"chat": "chat", "reasoning": "reasoning", "code": "code", "vision": "vision",
                  "coordinator": "unknown", "embedding": "unknown"}

# (model alias or None, decision name or None, fusion?) → raises PermissionDenied when not allowed.
Authorizer = Callable[[Optional[str], Optional[str], bool], None]


@dataclass
class Target:
    """Where a request goes: a fleet alias directly, or through routing."""

    kind: str  # "model" | "auto" | "fusion"
    name: str


@dataclass
class ChatOutcome:
    response: Optional[dict[str, Any]] = None
    chunks: Optional[AsyncIterator[dict[str, Any]]] = None
    headers: dict[str, str] = field(default_factory=dict)
    # Facts for metrics and logs (decision, model, task type).
    decision: str = "direct"
    model: str = ""
    task_type: str = "unknown"


def refusal_response(model: str, text: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-refusal-{uuid.uuid4().hex[:16]}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


class ChatService:
    def __init__(self, cfg: HorizonConfig, fleet: Any, router: Any = None, fusion: Any = None,
                 sessions: Any = None):
        """``fleet`` is a :class:`~serve_app.resilience.ResilientFleet` (or a fake with the same
        ``complete``/``stream``/``client`` surface); ``router`` a routing Router; ``fusion`` a
        FusionLooper; ``sessions`` a SessionStore (None = stateless)."""
        self.cfg = cfg
        self.fleet = fleet
        self.router = router
        self.fusion = fusion
        self.sessions = sessions
        self._unavailable = {u.alias: u for u in cfg.unavailable_models}

    # ------------------------------------------------------------------ model resolution
    def resolve(self, model: str) -> Target:
        if model in self.cfg.auto_slugs:
            return Target("auto", model)
        if model in self.cfg.fusion_slugs:
            return Target("fusion", model)
        if model in self.cfg.aliases:
            return Target("model", model)
        if model in self._unavailable:
            self.raise_unavailable(model)
        raise ModelNotFound(f"The model {model!r} does not exist. Available models: "
                            f"{', '.join(self.listed_models())}", param="model")

    def raise_unavailable(self, alias: str) -> None:
        u = self._unavailable[alias]
        raise ModelUnavailable(f"model {alias!r} ({u.role}) is not served by the "
                               f"{self.cfg.profile!r} profile: {u.reason}", param="model",
                               code="model_not_served")

    def listed_models(self) -> list[str]:
        return [*self.cfg.aliases, *self.cfg.auto_slugs, *self.cfg.fusion_slugs]

    def check_target_model(self, alias: str, messages: list[dict[str, Any]]) -> None:
        if alias in self._unavailable:
            self.raise_unavailable(alias)
        model = self.cfg.model(alias)
        if model.role == "embedding":
            raise InvalidRequest(f"model {alias!r} is an embedding model; use /v1/embeddings",
                                 param="model")
        if model.role != "vision" and has_image(messages):
            raise InvalidRequest(f"model {alias!r} does not accept images; send image requests to "
                                 f"a vision model or to an auto model", param="messages")

    # ------------------------------------------------------------------ serving
    async def chat(self, req: ChatCompletionRequest, *, debug: bool = False,
                   authorize: Optional[Authorizer] = None, session_id: Optional[str] = None,
                   fallback_ok: bool = True) -> ChatOutcome:
        target = self.resolve(req.model)
        body = req.engine_body()
        if has_image(body["messages"]):
            from serve_app.vision import validate_images

            validate_images(body, self.cfg.vision)

        routing = None
        if target.kind == "model":
            alias, decision, task_type = target.name, None, ROLE_TASK_TYPE[self.cfg.model(target.name).role]
        else:
            if self.router is None:
                raise ModelUnavailable("routing is not ready yet", retry_after=2)
            routing = await self.router.route(body, fusion_only=target.kind == "fusion")
            if routing is not None:
                from serve_app.observability.metrics import record_routing

                record_routing(routing.decision.name, routing.routing_ms / 1000)
            decision = routing.decision if routing is not None else None
            alias = routing.model if routing is not None else None
            task_type = routing.task_type if routing is not None else "unknown"

        headers: dict[str, str] = routing.headers(debug) if routing is not None else {}
        try:
            return await self._run_decision(req, body, target, alias, decision, task_type, routing,
                                            headers, authorize=authorize, session_id=session_id,
                                            fallback_ok=fallback_ok)
        except HorizonError as exc:
            # The client still learns where its request was routed (and eval tools can score it).
            exc.extra_headers = {**headers, **exc.extra_headers}
            raise

    async def _run_decision(self, req: ChatCompletionRequest, body: dict[str, Any], target: Target,
                            alias: Optional[str], decision: Any, task_type: str, routing: Any,
                            headers: dict[str, str], *, authorize: Optional[Authorizer],
                            session_id: Optional[str], fallback_ok: bool) -> ChatOutcome:
        use_fusion = target.kind == "fusion" or (decision is not None and decision.algorithm.type == "fusion")
        decision_name = decision.name if decision is not None else "direct"
        if authorize is not None:
            authorize(None if use_fusion else alias, None if decision is None else decision.name, use_fusion)

        if use_fusion:
            return await self._fusion(req, body, decision, task_type, headers)

        assert alias is not None
        if decision is not None and decision.refusal:
            headers["x-vsr-selected-model"] = "none"
            return ChatOutcome(response=refusal_response(req.model, decision.refusal), headers=headers,
                               decision=decision_name, model="none", task_type=task_type)

        self.check_target_model(alias, body["messages"])
        return await self._static(req, body, alias, decision, task_type, routing, headers,
                                  session_id=session_id, fallback_ok=fallback_ok)

    async def _static(self, req: ChatCompletionRequest, body: dict[str, Any], alias: str,
                      decision: Any, task_type: str, routing: Any, headers: dict[str, str], *,
                      session_id: Optional[str], fallback_ok: bool) -> ChatOutcome:
        """One model answers, through resilience; output contract and JSON formats enforced."""
        from serve_app.context_length import route_for_context
        from serve_app.outputs.structured import (apply_output_contract, contract_from_request, enforce_detailed,
                                                  prepare_request)

        decision_name = decision.name if decision is not None else "direct"
        contract = contract_from_request(body)  # a bad response_format is a 400 before any model runs
        if decision is not None and decision.output_contract:
            body = {**body, "messages": apply_output_contract(body["messages"], decision.output_contract)}
        body = self._sampling(body, alias, routing)
        turn = await self._prepare_session(session_id, task_type, alias, body)
        if turn is not None:
            body = {**body, "messages": turn.messages}
        # Too long for the model: a configured longer-context model in the chain, else a clean 400.
        placed = route_for_context(self.cfg, task_type, alias, body)
        if placed.rerouted:
            headers["x-vsr-context-reroute"] = f"{alias}->{placed.model}"
            alias = placed.model
        owner = self.cfg.model(alias).shares_engine_with or alias
        constrained = backend(self.cfg.model(owner).backend).constrains_decoding
        body = prepare_request(contract, body, engine_constrained=constrained)
        headers["x-vsr-selected-model"] = alias
        headers.setdefault("x-vsr-task-type", task_type)
        outcome = ChatOutcome(headers=headers, decision=decision_name, model=alias, task_type=task_type)

        if req.stream and contract is None:
            run = self.fleet.stream(task_type, alias, body, fallback_ok=fallback_ok)
            first = await run.__anext__()  # errors before any content stay plain HTTP errors
            self._fallback_headers(headers, run.hops, task_type)
            if run.model:
                headers["x-vsr-selected-model"] = outcome.model = run.model
            outcome.chunks = self._recording_stream(first, run, turn)
            return outcome

        response, hops = await self.fleet.complete(task_type, alias, body, fallback_ok=fallback_ok)
        self._fallback_headers(headers, hops, task_type)
        served = next((h.model for h in reversed(hops) if h.outcome == "ok"), alias)
        headers["x-vsr-selected-model"] = outcome.model = served
        if contract is not None:
            async def retry(corrective: dict[str, Any]) -> dict[str, Any]:
                answer, _ = await self.fleet.complete(task_type, served, corrective, fallback_ok=False)
                return answer

            enforced = await enforce_detailed(contract, response, retry, engine_constrained=constrained,
                                              request=body)
            response = enforced.response
            # How the JSON was obtained (valid / repaired / retried / tool_calls): operators see
            # whether a model needs the repair path, clients whether a retry cost them tokens.
            headers["x-vsr-structured-output"] = enforced.status
        if turn is not None:
            from serve_app.sessions.turns import answer_message, record_turn

            await record_turn(self.sessions, turn, answer_message(response))
        if req.stream:
            # A JSON answer had to be complete to be checked; it is replayed as a stream.
            outcome.chunks = _replay(response)
        else:
            outcome.response = response
        return outcome

    # ------------------------------------------------------------------ pieces
    def _sampling(self, body: dict[str, Any], alias: str, routing: Any) -> dict[str, Any]:
        """Temperature when the client set none: the routing matrix, else the model default."""
        if routing is not None:
            from serve_app.routing.sampling import apply_sampling_matrix

            body = apply_sampling_matrix(body, routing.sampling_key, self.cfg)
        defaults = self.cfg.model(alias).sampling
        for key in ("temperature", "top_p", "max_tokens"):
            value = getattr(defaults, key)
            if value is not None and body.get(key) is None and not (key == "max_tokens" and body.get("max_completion_tokens")):
                body = {**body, key: value}
        return body

    async def _prepare_session(self, session_id: Optional[str], task_type: str, alias: str,
                               body: dict[str, Any]):
        if self.sessions is None or session_id is None:
            return None
        from serve_app.sessions.context import history_budget
        from serve_app.sessions.turns import prepare_turn

        budget = history_budget(self.cfg.model(alias).engine.max_model_len,
                                body.get("max_completion_tokens") or body.get("max_tokens"),
                                self.cfg.sessions.output_reserve_tokens)
        return await prepare_turn(self.sessions, session_id, task_type, body["messages"],
                                  prompt_budget=budget)

    @staticmethod
    def _fallback_headers(headers: dict[str, str], hops: list[Any], task_type: str = "unknown") -> None:
        from serve_app.observability.metrics import record_fallback
        from serve_app.resilience.fallback import fallback_header

        value = fallback_header(hops)
        if value:
            headers["x-vsr-fallback"] = value
        for hop, nxt in zip(hops, hops[1:]):
            if hop.outcome != "ok":
                record_fallback(task_type, hop.model, nxt.model)

    async def _recording_stream(self, first: dict[str, Any], rest: AsyncIterator[dict[str, Any]],
                                turn: Any) -> AsyncIterator[dict[str, Any]]:
        """Pass chunks through; when a session is named, store the streamed answer at the end."""
        text: list[str] = []
        failed = False
        yield first
        async for chunk in rest:
            if "error" in chunk and not chunk.get("choices"):
                failed = True
            for choice in chunk.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content") or "")
            yield chunk
        if turn is not None and not failed:
            from serve_app.sessions.turns import record_turn

            await record_turn(self.sessions, turn, {"role": "assistant", "content": "".join(text)})

    async def _fusion(self, req: ChatCompletionRequest, body: dict[str, Any], decision: Any,
                      task_type: str, headers: dict[str, str]) -> ChatOutcome:
        from serve_app.fusion.policy import find_fusion_plugin, resolve_policy

        if self.fusion is None:
            raise ModelUnavailable("Fusion is not available in this deployment")
        full = {**body, "model": req.model}
        if req.plugins is not None:
            full["plugins"] = req.plugins
        from serve_app.outputs.structured import contract_from_request, enforce_detailed, prepare_request

        policy = resolve_policy(self.cfg, decision, find_fusion_plugin(full), full)
        contract = contract_from_request(body)
        result = await self.fusion.run(prepare_request(contract, body, engine_constrained=False), policy)
        from serve_app.observability.metrics import record_fusion_stage

        for stage, ms in (result.trace.get("timings_ms") or {}).items():
            if stage != "total":
                record_fusion_stage(policy.decision, stage, ms / 1000)
        if contract is not None:
            # The synthesis cannot constrain decoding: extract, repair and validate its JSON.
            enforced = await enforce_detailed(contract, result.response, None, engine_constrained=False)
            result.response = enforced.response
            headers["x-vsr-structured-output"] = enforced.status
        headers.update(result.headers())
        headers["x-vsr-selected-model"] = req.model
        headers.setdefault("x-vsr-task-type", task_type)
        outcome = ChatOutcome(headers=headers, decision=policy.decision,
                              model=req.model, task_type=task_type)
        if req.stream:
            outcome.chunks = _replay(result.response)
        else:
            outcome.response = result.response
        return outcome


async def _replay(response: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """A finished answer as stream chunks (Fusion and checked JSON answers stream after all stages)."""
    from serve_app.messages.chunks import response_to_chunks

    for chunk in response_to_chunks(response, include_usage=True):
        yield chunk
