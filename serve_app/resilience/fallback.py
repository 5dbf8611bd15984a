"""Fallback chains with a depth limit, over guarded models: :class:`ResilientFleet`.

A request for ``(task_type, alias)`` is served by a *plan*: the candidate models in order and
how many of them may be called.

* Candidates: ``alias`` followed by the models after it in the task type's configured chain
  (``resilience.fallback_chains``); when ``alias`` is not in that chain, the whole chain after
  it. A model appears once.
* Calls: at most ``1 + max_fallback_depth``. The loop walks a finite list and stops at the
  limit: no recursion, and no model is called beyond it (the seed's cascade through three
  models is impossible). ``fallback_ok=False``, a depth of 0, or a task type with a
  ``no_fallback_messages`` entry (vision) reduce the plan to ``alias`` alone.
* Skips: a model whose breaker is open, or that this profile does not serve, is passed over
  without a call and does not use up the depth (nothing was spent on it); it is still
  recorded as a hop.
* What falls back: only model failures (5xx: error, timeout, unavailable). Client errors go
  straight back, and a full queue answers 429 with Retry-After instead of spilling the
  overload onto the next model (the seed's backup path flooding K2).
* Degradation runs before the chain (see :mod:`.degrade`) and is recorded as a hop.

Every outcome is a :class:`Hop`; errors carry the hops in ``details["hops"]`` and
:func:`fallback_header` renders them for ``x-vsr-fallback``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Mapping, Optional, TypeVar

from ..fleet.availability import DeploymentState
from ..fleet.names import INGRESS_DEPLOYMENT, deployment_name
from ..fleet.protocol import ChatChunk, ChatRequest, ChatResponse, Fleet, ModelClient
from ..config.schema import HorizonConfig
from ..errors import DeploymentNotRunning, EngineRequestFailed, HorizonError, ModelNotFound, ModelUnavailable, \
    RateLimited, UpstreamTimeout
from .admission import PriorityAdmission
from .breaker import BreakerStore, CircuitBreaker, Clock, LocalBreakerStore, is_model_failure
from .degrade import Degrader
from .guarded import CircuitOpen, GuardedClient, GuardedModel, LiveStream
from .stats import ModelStats
from .timeouts import Deadlines, as_horizon_error

HopOutcome = Literal["ok", "error", "request_failed", "timeout", "unavailable", "breaker_open",
                     "rate_limited", "rejected", "degraded"]
T = TypeVar("T")


@dataclass
class Hop:
    """One step of serving a request: a model called, skipped or degraded away from."""

    model: str
    outcome: HopOutcome
    error: Optional[str] = None
    elapsed_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fallback_header(hops: list[Hop]) -> Optional[str]:
    """``x-vsr-fallback`` value, e.g. ``r1-distill:timeout,k2:ok``; None when the first model
    served the request directly."""
    if len(hops) <= 1 and all(h.outcome == "ok" for h in hops):
        return None
    return ",".join(f"{h.model}:{h.outcome}" for h in hops)


@dataclass
class _Plan:
    task_type: Optional[str]
    requested: str
    candidates: list[str]
    max_calls: int
    priority: int
    no_fallback_message: Optional[str]
    hops: list[Hop] = field(default_factory=list)


class _NotServed(ModelUnavailable):
    """A fleet alias this profile does not run (``unavailable_models``)."""


def _outcome_of(exc: BaseException) -> HopOutcome:
    if isinstance(exc, CircuitOpen):
        return "breaker_open"
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if isinstance(exc, ModelUnavailable):
        return "unavailable"
    if not is_model_failure(exc):
        return "rejected"
    if isinstance(exc, EngineRequestFailed):
        return "request_failed"
    return "error"


def _with_hops(exc: HorizonError, hops: list[Hop]) -> HorizonError:
    exc.details["hops"] = [h.as_dict() for h in hops]
    return exc


class StreamRun:
    """A streaming request through the fallback chain.

    Iterate it for chunk dicts. The first ``__anext__`` runs the chain until a model sends
    content (raising a HorizonError, with hops, if none does: nothing has been sent yet, so
    the API layer can still answer with a plain HTTP error). From then on :attr:`hops` is
    final and failures arrive as one error chunk (``{"error": {...}}``) that ends the stream.
    Call :meth:`aclose` when the client goes away.
    """

    def __init__(self, fleet: "ResilientFleet", plan: _Plan, request: ChatRequest, text: bool = False):
        self._fleet = fleet
        self._plan = plan
        self._request = request
        self._text = text
        self._live: Optional[LiveStream] = None
        self._chunks = self._run()

    @property
    def hops(self) -> list[Hop]:
        return self._plan.hops

    @property
    def model(self) -> Optional[str]:
        """The model serving the stream, once the first chunk has arrived."""
        return None if self._live is None else self._live.model.alias

    def __aiter__(self) -> "StreamRun":
        return self

    async def __anext__(self) -> ChatChunk:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()
        if self._live is not None:
            await self._live.aclose()

    async def _run(self) -> AsyncIterator[ChatChunk]:
        self._live = await self._fleet._run_plan(
            self._plan, lambda model: model.open_stream(self._request, self._plan.priority, text=self._text))
        try:
            async for chunk in self._live:
                yield chunk
        finally:
            await self._live.aclose()


class ResilientFleet:
    """The fleet as the router and Fusion should see it: every call guarded, with fallback.

    ``breaker_store`` defaults to an in-process store; give every ingress replica a
    :class:`~serve_app.resilience.breaker_ray.RayBreakerStore` to share breaker state.
    ``clock`` drives admission queue ages (and the default breaker store); tests inject one.
    """

    def __init__(self, fleet: Fleet, config: HorizonConfig, *,
                 breaker_store: Optional[BreakerStore] = None, clock: Clock = time.monotonic):
        self._fleet = fleet
        self._config = config
        self._settings = config.resilience
        self._clock = clock
        self.breaker_store: BreakerStore = breaker_store or LocalBreakerStore(self._settings.breaker, clock)
        self._models: dict[str, GuardedModel] = {}
        self._admissions: dict[str, PriorityAdmission] = {}
        self._degrader = Degrader(self._settings.degrade)
        # What the admission lines are sized by: Serve's deployment states (the deployment
        # board's latest read) and the ingress replicas in the demand board's latest roll call
        # (None: no fresh one), which is seconds fresher than Serve's.
        self._replica_states: Mapping[str, DeploymentState] = {}
        self._ingress_in_roll_call: Optional[int] = None

    # ------------------------------------------------------------------ models
    @property
    def served_aliases(self) -> list[str]:
        """Chat models of this profile (embedding models are reached through ``embedder``)."""
        return [m.alias for m in self._config.models if m.role != "embedding"]

    def publish_gauges(self) -> None:
        """Record every called model's breaker state and queue depth again (the gauges must
        be re-recorded within Ray's export window or they vanish from the scrape)."""
        for model in list(self._models.values()):
            model.publish_gauges(force=True)

    def _model(self, alias: str) -> GuardedModel:
        model = self._models.get(alias)
        if model is not None:
            return model
        if alias not in self._config.aliases:
            missing = next((u for u in self._config.unavailable_models if u.alias == alias), None)
            if missing is not None:
                raise _NotServed(f"model {alias} is not served by this deployment: {missing.reason}",
                                 details={"model": alias})
            raise ModelNotFound(f"model {alias!r} does not exist", param="model")
        model = GuardedModel(alias, self._fleet.client(alias),
                             CircuitBreaker(alias, self.breaker_store), self._admission(alias),
                             Deadlines.for_model(self._config, alias),
                             ModelStats(self._settings.health_window),
                             defaults=self._config.model(alias).sampling)
        self._models[alias] = model
        return model

    def _admission(self, alias: str) -> PriorityAdmission:
        # Aliases that share one engine share its capacity, so they share one line.
        engine = self._config.model(alias).shares_engine_with or alias
        if engine not in self._admissions:
            self._admissions[engine] = PriorityAdmission.from_config(self._config, engine, self._clock)
        return self._admissions[engine]

    @property
    def embedder(self):
        """The base fleet's embedding client (Fusion grounding, routing); not guarded here."""
        return self._fleet.embedder

    def admission(self, alias: str) -> PriorityAdmission:
        """The admission line in front of ``alias``'s engine (queue metrics, autoscaling)."""
        return self._admission(alias)

    def _engines(self) -> list[str]:
        """Aliases that own an engine (one admission line and one deployment each)."""
        return [m.alias for m in self._config.models
                if m.role != "embedding" and m.shares_engine_with is None]

    def waiting_by_deployment(self) -> dict[str, float]:
        """Requests waiting in this replica's lines, by model deployment (what the gateway's
        demand board sums over ingress replicas for each model's autoscaler)."""
        return {deployment_name(alias): float(self._admission(alias).queue_length) for alias in self._engines()}

    def waits_on_scale_out(self, states: Mapping[str, DeploymentState]) -> bool:
        """Whether requests wait in the line of a model that can still get replicas (fewer
        running than its ``scaling.max_replicas``): its autoscaler is likely adding some."""
        for alias in self._engines():
            state = states.get(deployment_name(alias))
            running = state.running if state is not None else 0
            if self._admission(alias).queue_length > 0 and running < self._config.model(alias).scaling.max_replicas:
                return True
        return False

    def follow_replicas(self, states: Mapping[str, DeploymentState]) -> None:
        """Resize every line to its model's running replicas and the running ingress replicas
        (the deployment board calls this on each refresh)."""
        self._replica_states = states
        self._resize_lines()

    def follow_ingress_roll_call(self, ready: Optional[int]) -> None:
        """The ingress replicas taking requests, as the demand board's latest roll call counts
        them (None: no fresh roll call). Every ingress replica reports every 0.5 s, so a replica
        that joins or dies changes every line's share within a few seconds instead of at the
        deployment board's next read of Serve's states (up to its steady 20 s)."""
        if ready is not None and ready < 1:
            ready = None
        if ready != self._ingress_in_roll_call:
            self._ingress_in_roll_call = ready
            self._resize_lines()

    def _resize_lines(self) -> None:
        ingress = self._replica_states.get(INGRESS_DEPLOYMENT)
        ingress_replicas = self._ingress_in_roll_call or (ingress.running if ingress is not None else 1)
        for alias in self._engines():
            state = self._replica_states.get(deployment_name(alias))
            if state is not None:
                self._admission(alias).resize(state.running, ingress_replicas)

    def client(self, alias: str, task_type: Optional[str] = None) -> ModelClient:
        """``alias`` behind breaker, admission and timeouts, with NO fallback (Fusion panel)."""
        return GuardedClient(self._model(alias), self._settings.priority_of(task_type))

    # ------------------------------------------------------------------ planning
    def _takes_tools(self, alias: str) -> bool:
        return alias not in self._config.aliases or self._config.tool_calling(alias) is not None

    def _plan(self, task_type: Optional[str], alias: str, fallback_ok: bool,
              needs_tools: bool = False) -> _Plan:
        settings = self._settings
        served = alias in self._config.aliases
        if not served and alias not in {u.alias for u in self._config.unavailable_models}:
            raise ModelNotFound(f"model {alias!r} does not exist", param="model")
        hops: list[Hop] = []
        primary, avoided = alias, set()
        message = settings.no_fallback_messages.get(task_type) if task_type else None
        if fallback_ok and served:
            chosen = self._degrader.choose(alias, task_type, self._queue_wait_s, self._can_take)
            if chosen is not None:
                hops.append(Hop(alias, "degraded", chosen.reason))
                primary, avoided = chosen.rule.target, {alias}
        chain = settings.fallback_chains.get(task_type, []) if task_type else []
        if primary in chain:
            rest = chain[chain.index(primary) + 1:]
        else:
            rest = list(chain)
        candidates = [primary] + [m for m in dict.fromkeys(rest) if m != primary and m not in avoided
                                  and (not needs_tools or self._takes_tools(m))]
        depth = settings.max_fallback_depth
        if not fallback_ok or message is not None or depth == 0:
            candidates, depth = [primary], 0
        return _Plan(task_type, alias, candidates, 1 + depth, settings.priority_of(task_type),
                     message, hops)

    def _queue_wait_s(self, alias: str) -> float:
        return self._model(alias).admission.estimated_wait_s()

    def _can_take(self, alias: str) -> bool:
        try:
            return self._model(alias).breaker.allows()
        except HorizonError:
            return False

    # ------------------------------------------------------------------ running a plan
    async def _run_plan(self, plan: _Plan, attempt: Callable[[GuardedModel], Awaitable[T]]) -> T:
        calls = 0
        last: Optional[HorizonError] = None
        limit_hit = False
        for alias in plan.candidates:
            if calls >= plan.max_calls:
                limit_hit = True  # more candidates remain, but the depth is used up
                break
            started = time.perf_counter()
            try:
                result = await attempt(self._model(alias))
            except Exception as raw:
                exc = as_horizon_error(raw, alias)
                elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
                plan.hops.append(Hop(alias, _outcome_of(exc), exc.message, elapsed_ms))
                if not isinstance(exc, (CircuitOpen, _NotServed, DeploymentNotRunning)):
                    calls += 1  # it was called (or queued for): it uses up the depth
                if not is_model_failure(exc):
                    # Client errors and back-pressure are answers, not reasons to fall back.
                    raise _with_hops(exc, plan.hops) from raw
                last = exc
                continue
            plan.hops.append(Hop(alias, "ok", None, round((time.perf_counter() - started) * 1000, 1)))
            return result
        raise self._exhausted(plan, last, limit_hit)

    def _exhausted(self, plan: _Plan, last: Optional[HorizonError], limit_hit: bool) -> HorizonError:
        assert last is not None, "a plan has at least one candidate"
        if plan.no_fallback_message is not None:
            # Vision: no fallback, the operator's clear message, the failure's own status.
            exc = type(last)(plan.no_fallback_message, retry_after=last.retry_after,
                             details={"model": plan.requested, "cause": last.message})
            return _with_hops(exc, plan.hops)
        if len(plan.candidates) == 1:
            return _with_hops(last, plan.hops)
        tried = "; ".join(f"{h.model}: {h.error or h.outcome}" for h in plan.hops if h.outcome != "degraded")
        if {h.outcome for h in plan.hops} - {"degraded"} == {"request_failed"}:
            # Each model's engine failed on this very request: it is not a matter of time,
            # so no 503 and no Retry-After.
            return _with_hops(EngineRequestFailed(
                f"Every model tried failed on this request ({tried}); sent again unchanged it "
                "will fail the same way.", details={"model": plan.requested}), plan.hops)
        if limit_hit:
            depth = plan.max_calls - 1
            why = f"the fallback limit ({depth} hop{'s' if depth != 1 else ''}) was reached"
        else:
            why = "no other model is configured for it"
        task = plan.task_type or "this"
        retry = max(self._settings.retry_after.min_s, last.retry_after or 0.0)
        return _with_hops(ModelUnavailable(
            f"No model could serve this {task} request right now ({tried}); {why}. "
            f"Please retry shortly.", retry_after=retry,
            details={"model": plan.requested}), plan.hops)

    # ------------------------------------------------------------------ public calls
    async def complete(self, task_type: str, alias: str, request: ChatRequest, *,
                       fallback_ok: bool = True, needs_tools: bool = False,
                       text: bool = False) -> tuple[ChatResponse, list[Hop]]:
        """One answer through the chain. ``needs_tools``: hops only to models with tool calling
        (the request carries tools). ``text``: a text completion (``/v1/completions``) instead
        of a chat completion, through the same gates."""
        plan = self._plan(task_type, alias, fallback_ok, needs_tools)
        response = await self._run_plan(plan, lambda model: model.complete(request, plan.priority, text=text))
        return response, plan.hops

    def stream(self, task_type: str, alias: str, request: ChatRequest, *,
               fallback_ok: bool = True, needs_tools: bool = False, text: bool = False) -> StreamRun:
        return StreamRun(self, self._plan(task_type, alias, fallback_ok, needs_tools), request, text=text)

    # ------------------------------------------------------------------ health
    def health(self) -> dict[str, dict[str, Any]]:
        """Per model: breaker, admission line and rolling call statistics."""
        report: dict[str, dict[str, Any]] = {}
        for alias in self.served_aliases:
            model = self._model(alias)
            model.publish_gauges()
            breaker = model.breaker.snapshot()
            queue = model.admission.snapshot()
            report[alias] = {
                "breaker_state": breaker["state"],
                "breaker": breaker,
                "queue_length": queue["queue_length"],
                "in_flight": queue["in_flight"],
                "estimated_queue_wait_s": queue["estimated_queue_wait_s"],
                "admission": queue,
                **model.stats.snapshot(),
            }
        return report
