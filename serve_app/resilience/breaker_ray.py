"""Breaker state shared by every ingress replica through one named, detached Ray actor.

Design (the trade-off is documented in docs/resilience.md):

* One registry per Serve **application** (actor ``horizon-breakers:<app>``): two applications
  in one cluster (the e2e suite runs ``/sim`` and ``/local``; an operator may run a canary
  beside production) each have their own breaker states and their own settings, so neither
  opens the other's breaker nor adopts the other's thresholds. Within one registry the state
  is kept per model alias.

* The actor (:class:`BreakerRegistry`) holds the authoritative state of every model and applies
  :class:`~serve_app.resilience.breaker.BreakerPolicy` to the outcomes replicas report.
* Each replica's :class:`RayBreakerStore` keeps a local mirror. The hot path only touches the
  mirror: ``get`` reads it, ``record`` applies the outcome to it at once (so a replica that
  sees five failures stops sending immediately) and queues the outcome.
* A background task, every ``breaker.sync_interval_s``, ships the queued outcomes to the actor
  and receives all states back in the same round trip: one remote call per interval per
  replica, none per request. A replica acts on state at most one interval (plus a round trip)
  old; outcomes are never lost, only delayed by that much.
* If the actor is unreachable the replica keeps its local mirror (a per-replica breaker) and
  retries; it never blocks or fails a request because of the store.

Timestamps are wall-clock (``time.time``) because replicas on different nodes compare them;
monotonic clocks are per process. The actor methods are synchronous, so the calls of one
replica run in the order it sent them.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

from ..app_scoped import CHECK_INTERVAL_S, end_with_application
from ..config.resilience import BreakerSettings
from ..periodic import Periodic
from .breaker import BreakerPolicy, BreakerState, Clock, LocalBreakerStore, Outcome

log = logging.getLogger(__name__)

DEFAULT_ACTOR_NAME = "horizon-breakers"
DEFAULT_NAMESPACE = "horizon"


def registry_name(app_name: Optional[str]) -> str:
    """The registry actor's name for the Serve application ``app_name`` (None: outside Serve)."""
    return f"{DEFAULT_ACTOR_NAME}:{app_name}" if app_name else DEFAULT_ACTOR_NAME

# (alias, outcome, timestamp) as shipped to the actor.
OutcomeEvent = tuple[str, str, float]


class BreakerRegistry:
    """The actor's body: plain Python, so tests drive it without Ray."""

    def __init__(self, settings: Optional[dict[str, Any]] = None, app_name: Optional[str] = None,
                 watch_interval_s: float = CHECK_INTERVAL_S):
        self._settings = BreakerSettings(**(settings or {}))
        self._policy = BreakerPolicy(self._settings)
        self._states: dict[str, BreakerState] = {}
        # As a detached actor of a Serve application: end once the application is deleted.
        end_with_application(app_name, interval_s=watch_interval_s)

    def configure(self, settings: dict[str, Any]) -> None:
        # A redeploy of this application with new breaker settings reuses its detached actor:
        # adopt them. Other applications have registries of their own (registry_name).
        self._settings = BreakerSettings(**settings)
        self._policy = BreakerPolicy(self._settings)

    def settings(self) -> dict[str, Any]:
        return self._settings.model_dump()

    def sync(self, events: list[OutcomeEvent]) -> dict[str, dict[str, Any]]:
        for alias, outcome, at in events:
            current = self._states.get(alias, BreakerState())
            self._states[alias] = self._policy.apply(current, outcome, at)  # type: ignore[arg-type]
        return {alias: st.as_dict() for alias, st in self._states.items()}

    def states(self) -> dict[str, dict[str, Any]]:
        return self.sync([])


class RayBreakerStore:
    """A :class:`~serve_app.resilience.breaker.BreakerStore` backed by the shared registry.

    ``registry`` is a Ray actor handle of :class:`BreakerRegistry` (see :meth:`connect`); any
    object whose ``sync.remote(events)`` / ``configure.remote(settings)`` return awaitables
    works, which is how the unit tests run it without Ray.
    """

    def __init__(self, registry: Any, settings: BreakerSettings, clock: Clock = time.time):
        self._registry = registry
        self._settings = settings
        self._mirror = LocalBreakerStore(settings, clock)
        self.policy: BreakerPolicy = self._mirror.policy
        self._pending: list[OutcomeEvent] = []
        self._configured = False
        self.last_sync_at: Optional[float] = None
        self._loop = Periodic(self.sync_once, lambda: self._settings.sync_interval_s,
                              failing="breaker registry sync failed; using local state",
                              recovered="breaker registry reachable again")

    @property
    def sync_failures(self) -> int:
        return self._loop.failures

    # ------------------------------------------------------------------ construction
    @classmethod
    def connect(cls, settings: BreakerSettings, *, app_name: Optional[str] = None,
                namespace: str = DEFAULT_NAMESPACE,
                watch_interval_s: float = CHECK_INTERVAL_S) -> "RayBreakerStore":
        """Get or create ``app_name``'s detached registry actor (call inside a Ray worker). The
        actor ends once the application is gone (:mod:`serve_app.app_scoped`)."""
        import ray  # local import: the rest of the package must not need Ray

        actor_cls = ray.remote(BreakerRegistry)
        # No task events: every ingress replica calls sync() 4 times a second, forever, and Ray's
        # GCS keeps each call's events (≈ 3 KB) up to 100,000 tasks: a steady climb of memory
        # that buys nothing (loadtests/bench_task_events.py, docs/benchmarks.md "Memory").
        handle = actor_cls.options(name=registry_name(app_name), namespace=namespace, lifetime="detached",
                                   get_if_exists=True, num_cpus=0, max_restarts=-1,
                                   enable_task_events=False).remote(settings.model_dump(), app_name,
                                                                    watch_interval_s)
        return cls(handle, settings)

    # ------------------------------------------------------------------ BreakerStore
    def now(self) -> float:
        return self._mirror.now()

    def get(self, alias: str) -> BreakerState:
        self._ensure_started()
        return self._mirror.get(alias)

    def record(self, alias: str, outcome: Outcome) -> None:
        self._mirror.record(alias, outcome)
        self._pending.append((alias, outcome, self.now()))
        self._ensure_started()

    # ------------------------------------------------------------------ sync loop
    async def sync_once(self) -> None:
        """Push queued outcomes, pull every state. Raises when the registry call fails."""
        if not self._configured:
            await self._registry.configure.remote(self._settings.model_dump())
            self._configured = True
        sent, self._pending = self._pending, []
        try:
            states = await self._registry.sync.remote(sent)
        except BaseException:
            # Keep the outcomes for the next attempt, ahead of any recorded meanwhile.
            self._pending = sent + self._pending
            raise
        self._mirror.replace_all({a: BreakerState.from_dict(d) for a, d in states.items()})
        # Outcomes recorded while the call was in flight are not in the reply yet: replay
        # them on the mirror so this replica does not forget what it has just seen.
        for alias, outcome, at in self._pending:
            self._mirror.record_at(alias, outcome, at)  # type: ignore[arg-type]
        self.last_sync_at = self.now()

    def start(self) -> None:
        """Start the background sync on the running event loop (idempotent)."""
        self._loop.start()

    async def aclose(self) -> None:
        await self._loop.aclose()
        if self._pending:
            try:
                await self.sync_once()
            except Exception as exc:
                log.warning("final breaker sync failed: %s", exc)

    def _ensure_started(self) -> None:
        if not self._loop.running:
            try:
                self.start()
            except RuntimeError:
                pass  # no running loop (e.g. constructed in a sync __init__): start later
