"""The chat pipeline: one request in, one answer (or chunk stream) out — no HTTP here.

Order of work for one request: resolve ``model`` (fleet alias, auto slug, Fusion slug) → check
images → route (signals and decisions; a fleet alias bypasses them) → authorise → the decision's
strategy: a refusal, :class:`~.static.StaticStrategy` (one model through resilience, sessions,
structured outputs) or :class:`~.fusion.FusionStrategy` (panel → judge → synthesis). The
``x-vsr-*`` facts gathered on the way become response headers, on errors too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..config.schema import HorizonConfig
from ..errors import HorizonError, InvalidRequest, ModelUnavailable
from ..fusion.looper import FusionLooper
from ..fusion.policy import request_panel_param
from ..messages.view import has_image
from ..observability.metrics import record_routing
from ..resilience.fallback import ResilientFleet
from ..routing.decisions import primary_model
from ..routing.router import Router, RoutingResult
from ..sessions.store import SessionStore
from .completions import CompletionService
from .context import Authorizer, ChatCall, ChatOutcome, RequestContext, refusal_response
from .fusion import FusionStrategy
from .images import validate_images
from .static import StaticStrategy, replay
from .targets import Targets
from .tools import check_decision_takes_tools, check_n, check_tools


class ChatService:
    """``fleet`` is a :class:`~serve_app.resilience.ResilientFleet`; ``router`` is installed once
    routing has started (None until then); ``fusion`` a FusionLooper; ``sessions`` a SessionStore
    (None = stateless)."""

    def __init__(self, cfg: HorizonConfig, fleet: ResilientFleet, router: Optional[Router] = None,
                 fusion: Optional[FusionLooper] = None, sessions: Optional[SessionStore] = None):
        self.cfg = cfg
        self.fleet = fleet
        self.router = router
        self.sessions = sessions
        self.targets = Targets(cfg)
        self.static = StaticStrategy(cfg, fleet, self.targets, sessions)
        self.fusion = FusionStrategy(cfg, fusion, sessions)
        self.completions = CompletionService(cfg, fleet, self.targets, self.route_text)

    def resolve(self, model: str):
        return self.targets.resolve(model)

    def check(self, call: ChatCall) -> None:
        """What is wrong with the request itself (400 naming the parameter), before routing:
        the intent classifier is already a model call."""
        check_tools(call.body)
        check_n(self.cfg, call.body)

    async def route(self, call: ChatCall, fusion_only: bool) -> Optional[RoutingResult]:
        if self.router is None:
            raise ModelUnavailable("routing is not ready yet", retry_after=2)
        return self.served(await self.router.route(call.body, fusion_only=fusion_only), call.body["messages"])

    def served(self, result: Optional[RoutingResult], messages: list) -> Optional[RoutingResult]:
        """The routing result, or the default decision in its place when the decision's model is
        one the profile does not serve (``unavailable_models``) and the default's model can take
        the request. A text question the intent head took for a vision one is then answered on a
        profile without a vision model; a request with an image still gets the 503 saying why
        (no other model can read it). Routing itself (``horizon route``, the evaluation) is
        unchanged: it scores the profile's decisions, whatever this profile serves."""
        if result is None or self.targets.served(result.model):
            return result
        default = self.cfg.decision(self.cfg.routing.default_decision)
        model = primary_model(default)
        if default.algorithm.type == "fusion" or default.refusal or not self.targets.served(model):
            return result
        try:
            self.targets.check_chat_model(model, messages)
        except HorizonError:
            return result
        return replace(result, decision=default, model=model, task_type=default.task_type or "unknown",
                       instead_of=f"{result.decision.name}:{result.model}")

    async def route_text(self, text: str) -> RoutingResult:
        """The decision for a text prompt (``/v1/completions``), among the decisions that are not
        Fusion (Fusion synthesises chat answers)."""
        if self.router is None:
            raise ModelUnavailable("routing is not ready yet", retry_after=2)
        messages = [{"role": "user", "content": text}]
        result = self.served(await self.router.route({"messages": messages}, without_fusion=True), messages)
        assert result is not None  # the default decision answers what nothing else matched
        if result.decision.algorithm.type == "fusion":
            raise InvalidRequest(f"the prompt matched no decision but the default, "
                                 f"{result.decision.name!r}, which is Fusion: Fusion answers chat "
                                 "completions only; name a fleet model", param="model")
        return result

    async def chat(self, call: ChatCall, *, debug: bool = False, authorize: Optional[Authorizer] = None,
                   session_id: Optional[str] = None, fallback_ok: bool = True) -> ChatOutcome:
        ctx = RequestContext(call=call, target=self.targets.resolve(call.model), body=call.body,
                             debug=debug, fallback_ok=fallback_ok, session_id=session_id,
                             authorize=authorize)
        self.check(call)
        if has_image(ctx.body["messages"]):
            validate_images(ctx.body, self.cfg.vision)
        if ctx.target.kind == "model":
            ctx.alias, ctx.task_type = ctx.target.name, self.targets.task_type_of(ctx.target.name)
        else:
            ctx.routing = await self.route(call, fusion_only=ctx.target.kind == "fusion")
            if ctx.routing is not None:
                record_routing(ctx.routing.decision.name, ctx.routing.routing_ms / 1000)
                ctx.decision, ctx.alias = ctx.routing.decision, ctx.routing.model
                ctx.task_type = ctx.routing.task_type
                ctx.headers = ctx.routing.headers(debug)
        try:
            return await self._run_decision(ctx)
        except HorizonError as exc:
            # The client still learns where its request was routed (and eval tools can score it).
            exc.extra_headers = {**ctx.headers, **exc.extra_headers}
            raise

    async def _run_decision(self, ctx: RequestContext) -> ChatOutcome:
        if ctx.authorize is not None:
            panel_param = (request_panel_param({"plugins": ctx.call.plugins})
                           if ctx.uses_fusion and ctx.call.plugins is not None else None)
            ctx.authorize(None if ctx.uses_fusion else ctx.alias,
                          None if ctx.decision is None else ctx.decision.name, ctx.uses_fusion,
                          panel_param)
        check_decision_takes_tools(ctx.decision, ctx.body)
        if ctx.uses_fusion:
            return await self.fusion.run(ctx)
        if ctx.decision is not None and ctx.decision.refusal:
            ctx.headers["x-vsr-selected-model"] = "none"
            refusal = refusal_response(ctx.call.model, ctx.decision.refusal)
            # A client that asked for a stream reads SSE, also when no model answers.
            return ChatOutcome(response=None if ctx.call.stream else refusal,
                               chunks=replay(refusal) if ctx.call.stream else None,
                               headers=ctx.headers, decision=ctx.decision_name, model="none",
                               task_type=ctx.task_type)
        return await self.static.run(ctx)
