"""The gateway: what every endpoint does, given the parts the composition root wired.

The HTTP layer (``serve_app.api.http``) only parses and frames; everything it answers comes from
a method here. The parts are built once per ingress replica by :func:`serve_app.app.compose_gateway`
(from Serve handles) or by tests (from a fake fleet), so every endpoint runs in process.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Optional

from deployments.gateway_demand import DemandPublisher

from ..auth.keys import ApiKeyAuthenticator, Principal
from ..chat.completions import CompletionCall
from ..chat.context import ChatCall, ChatOutcome
from ..chat.pipeline import ChatService
from ..config.schema import HorizonConfig
from ..errors import HorizonError, InvalidRequest
from ..fleet.availability import DeploymentBoard
from ..fusion.policy import no_eligible_decision_error
from ..observability.metrics import record_request
from ..observability.node_metrics import fetch_node_metrics
from ..periodic import Periodic
from ..resilience.fallback import ResilientFleet
from ..resilience.guarded import GAUGE_REFRESH_S
from ..sessions.ids import scoped_session_id, session_id_from_headers
from ..sessions.stored_responses import ResponseStore
from .catalog import ModelCatalog
from .embeddings import Embeddings
from .health import health_report
from .startup import RoutingStartup


log = logging.getLogger("ray.serve")

# Builds the routed part of a gateway (the chat service and its routing start) for a profile.
Recompose = Callable[[HorizonConfig], tuple[ChatService, RoutingStartup]]


async def _await_at_most(task: asyncio.Task, timeout_s: Optional[float]) -> None:
    """Wait for ``task`` at most ``timeout_s`` (None: until done); it goes on after that."""
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except asyncio.TimeoutError:
        pass


def header_flag(headers: Mapping[str, str], name: str, default: bool) -> bool:
    """An ``x-vsr-*`` switch: ``true`` or ``false`` in any case, the default when absent or
    empty. Anything else is a 400 naming the header: read as false, ``x-vsr-allow-fallback: 1``
    or ``yes`` silently turned the fallback chain off."""
    word = (headers.get(name) or "").strip().lower()
    if not word:
        return default
    if word not in ("true", "false"):
        raise InvalidRequest(f"header {name!r} must be 'true' or 'false', got {word[:40]!r}", param=name)
    return word == "true"


@dataclass
class RoutingUpdate:
    """A change of the live settings that is not in effect: ``pending`` while its routing starts
    (``startup``), or ``failed``, and why."""
    status: str
    detail: str
    startup: Optional[RoutingStartup] = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def report(self) -> dict[str, str]:
        """What ``/health`` shows: a pending change says what its routing waits for (the
        embedding model, say)."""
        detail = self.detail
        if self.status == "pending" and self.startup is not None and self.startup.error:
            detail = f"{detail}: {self.startup.error}"
        return {"status": self.status, "detail": detail}


@dataclass
class Gateway:
    cfg: HorizonConfig
    fleet: ResilientFleet
    service: ChatService
    auth: ApiKeyAuthenticator
    board: DeploymentBoard
    catalog: ModelCatalog
    embeddings: Embeddings
    startup: RoutingStartup
    # Reports this replica's admission backlog to the models' autoscalers (None in tests).
    demand: Optional[DemandPublisher] = None
    # Stored responses of the Responses API, and the Conversations API's conversations (None:
    # the profile stores none).
    response_store: Optional[ResponseStore] = None
    conversation_store: Optional[ResponseStore] = None
    # This ingress replica's id (Serve's), sent as x-vsr-replica to x-vsr-debug requests.
    replica: Optional[str] = None
    # Builds the chat service and routing for new live settings (None: settings are fixed).
    recompose: Optional[Recompose] = None
    # A change of the live settings not in effect (None: the last one is).
    update: Optional[RoutingUpdate] = field(default=None, init=False)
    _update_task: Optional[asyncio.Task] = field(default=None, init=False, repr=False)
    _digest: tuple[Optional[HorizonConfig], str] = field(default=(None, ""), init=False, repr=False)

    def start(self) -> None:
        """Start the background work (deployment states, routing) on the running event loop."""
        self.board.start()
        self._routing_task = asyncio.get_running_loop().create_task(self.startup.run())
        self._gauges = Periodic(self._publish_gauges, GAUGE_REFRESH_S, failing="gauges not refreshed",
                                recovered="gauges refreshed again")
        self._gauges.start()

    def join_roll_call(self) -> None:
        """This replica takes requests from now on (Serve puts it in rotation once its
        constructor returns): report its backlog and routing to the demand board every
        interval, and share the admission lines among the replicas that report. A replica
        still in its constructor does not report, so it takes no share of the lines."""
        if self.demand is None:
            return
        self.demand.routing = self.routing_state
        self.demand.on_roll_call = self._follow_roll_call
        self.demand.start()

    def _follow_roll_call(self, roll_call: Optional[dict[str, Any]]) -> None:
        """Share the admission lines among the replicas in the roll call; with no fresh one
        (the board unreachable), among Serve's running replicas."""
        self.fleet.follow_ingress_roll_call(None if roll_call is None else int(roll_call.get("replicas", 0)))

    async def _publish_gauges(self) -> None:
        self.fleet.publish_gauges()

    async def routing_started(self, timeout_s: Optional[float] = None) -> None:
        """Wait until routing has started, or failed to (``ready`` says which), or at most
        ``timeout_s`` (the start goes on in the background)."""
        await _await_at_most(self._routing_task, timeout_s)

    async def reconfigure(self, cfg: HorizonConfig, wait_s: Optional[float] = None) -> None:
        """Route with ``cfg``: the profile with new live settings (serve_app.config.live).

        The new routing starts beside the one serving now, which goes on answering until the
        new one is ready and then hands over at once (one assignment on the event loop): a
        request meets one set of settings from start to end, and none waits for the change.
        Waits at most ``wait_s``; the start goes on in the background. If it fails, the
        current settings stay and ``/health`` says why."""
        assert self.recompose is not None, "this gateway was composed without live settings"
        if self._update_task is not None:
            self._update_task.cancel()
        service, startup = self.recompose(cfg)
        self.update = RoutingUpdate("pending", "routing starts with the new settings", startup)

        async def take_over() -> None:
            await startup.run()
            if service.router is None:
                self.update = RoutingUpdate("failed", f"the new routing settings did not start "
                                            f"({startup.error}); the previous ones stay in effect")
                log.error("routing settings not applied: %s", startup.error)
                return
            self.cfg, self.service, self.startup, self.update = cfg, service, startup, None
            log.info("routing settings applied: %d decisions", len(cfg.routing.decisions))

        task = self._update_task = asyncio.get_running_loop().create_task(take_over())
        try:
            await _await_at_most(task, wait_s)
        except asyncio.CancelledError:
            # A later change replaced this one (its start was cancelled): done here. Only a
            # cancellation of this call itself goes on up.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    def reject_update(self, error: str) -> None:
        """Live settings that failed validation: kept out, and shown on ``/health``."""
        self.update = RoutingUpdate("failed", f"{error}\nThe previous settings stay in effect.")

    @property
    def ready(self) -> bool:
        return self.service.router is not None

    def _not_ready(self) -> HorizonError:
        return self.startup.not_ready(self.cfg.global_.server.retry_after_s or 1)

    async def principal(self, authorization: Optional[str]) -> Principal:
        principal = self.auth.authenticate(authorization)
        # Awaited: with auth.rate_limit_store: redis the bucket is a Redis round trip.
        await self.auth.check_rate(principal)
        return principal

    # ------------------------------------------------------------------ chat
    async def chat(self, call: ChatCall, principal: Principal, headers: Mapping[str, str]) -> ChatOutcome:
        started = time.perf_counter()

        def authorize(model: Optional[str], decision: Optional[str], fusion: bool,
                      request_panel: Optional[str]) -> None:
            self.auth.authorize(principal, model=model, decision=decision, fusion=fusion,
                                request_panel=request_panel)

        session_id = scoped_session_id(session_id_from_headers(headers, self.cfg.sessions),
                                       None if principal.anonymous else principal.name)
        return await self._measured(call.model, started, lambda: self.service.chat(
            call, debug=header_flag(headers, "x-vsr-debug", False), authorize=authorize,
            fallback_ok=header_flag(headers, "x-vsr-allow-fallback", True), session_id=session_id))

    async def completions(self, call: CompletionCall, principal: Principal,
                          headers: Mapping[str, str]) -> ChatOutcome:
        """``/v1/completions``: a text prompt through routing (auto slugs) and resilience."""
        started = time.perf_counter()

        def authorize(model: Optional[str], decision: Optional[str], fusion: bool) -> None:
            self.auth.authorize(principal, model=model, decision=decision, fusion=fusion)

        return await self._measured(call.model, started, lambda: self.service.completions.complete(
            call, debug=header_flag(headers, "x-vsr-debug", False), authorize=authorize,
            fallback_ok=header_flag(headers, "x-vsr-allow-fallback", True)))

    async def _measured(self, model: str, started: float,
                        run: Callable[[], Awaitable[ChatOutcome]]) -> ChatOutcome:
        """Chat and text completions alike: the readiness check (an unknown model is a 404 in
        every state; routing is needed only by the slugs) and the request metric, errors
        included (a stream's is recorded at its first chunk)."""
        try:
            if self.service.resolve(model).kind != "model" and not self.ready:
                raise self._not_ready()
            outcome = await run()
        except HorizonError as exc:
            record_request("error", model, exc.status, time.perf_counter() - started)
            raise
        if outcome.response is not None:
            usage = outcome.response.get("usage") or {}
            record_request(outcome.decision, outcome.model, 200, time.perf_counter() - started,
                           tokens_in=usage.get("prompt_tokens", 0), tokens_out=usage.get("completion_tokens", 0))
        return outcome

    def record_first_chunk(self, outcome: ChatOutcome, started: float) -> None:
        elapsed = time.perf_counter() - started
        record_request(outcome.decision, outcome.model, 200, elapsed, ttft_s=elapsed)

    async def route(self, call: ChatCall, debug: bool) -> tuple[dict[str, Any], dict[str, str]]:
        """The routing decision for a chat request, without generating."""
        if not self.ready:
            raise self._not_ready()
        target = self.service.resolve(call.model)
        result = await self.service.route(call, fusion_only=target.kind == "fusion")
        if result is None:
            raise no_eligible_decision_error(call.model)
        return result.to_dict(), result.headers(debug)

    # ------------------------------------------------------------------ the rest
    def models(self, principal: Principal) -> dict[str, Any]:
        return self.catalog.list(principal)

    def model(self, model_id: str, principal: Principal) -> dict[str, Any]:
        return self.catalog.retrieve(model_id, principal)

    async def embed(self, principal: Principal, model: str, texts: list[Any],
                    encoding_format: str, dimensions: Optional[int] = None,
                    truncate_prompt_tokens: Optional[int] = None,
                    truncation_side: str = "right") -> dict[str, Any]:
        return await self.embeddings.create(principal, model, texts, encoding_format,  # type: ignore[arg-type]
                                            dimensions, truncate_prompt_tokens, truncation_side)  # type: ignore[arg-type]

    @property
    def routing_digest(self) -> str:
        """A short hash of the routing settings in effect: the same on every ingress replica
        that routes alike, so an operator can see that each took a change."""
        if self._digest[0] is not self.cfg:
            text = self.cfg.routing.model_dump_json(by_alias=True)
            self._digest = (self.cfg, hashlib.sha256(text.encode()).hexdigest()[:12])
        return self._digest[1]

    def routing_state(self) -> dict[str, str]:
        """What this replica routes with, for the ingress roll call: the settings' digest, and
        ``starting`` (no routing yet), ``pending`` / ``failed`` (a change not in effect) or
        ``ready``."""
        if not self.ready:
            state = "starting"
        elif self.update is not None:
            state = self.update.status
        else:
            state = "ready"
        return {"routing_settings": self.routing_digest, "routing": state}

    async def health(self) -> dict[str, Any]:
        update = None if self.update is None else self.update.report()
        body = await health_report(self.cfg, self.board, self.fleet, self.ready, self.startup.error,
                                   sessions=self.service.sessions, auth=self.auth, update=update)
        body["routing_settings"] = self.routing_digest
        # Every ingress replica's routing, from the demand board's latest answer (at most a
        # publish interval old): one digest counted for all of them means all took a change.
        roll_call = self.demand.roll_call if self.demand is not None else None
        if roll_call is not None:
            body["ingress"] = roll_call
        return body

    async def metrics(self) -> str:
        return await fetch_node_metrics()
