"""Breaker state shared by every ingress replica through one named, detached Ray actor.

Design (the trade-off is documented in docs/resilience.md):

* One registry per Serve **application**, in the application's state actor
  (``horizon-state.v2:<app>``, :mod:`serve_app.app_state`, which hosts the demand board too): two
  applications in one cluster (the e2e suite runs ``/sim`` and ``/local``; an operator may run
  a canary beside production) each have their own breaker states and their own settings, so
  neither opens the other's breaker nor adopts the other's thresholds. Within one registry the
  state is kept per model alias.

* The actor (:class:`BreakerRegistry`) holds the authoritative state of every model and applies
  :class:`~serve_app.resilience.breaker.BreakerPolicy` to the outcomes replicas report. Every
  change of its states gets a new version (within an epoch: a restarted actor starts a new one).
* Each replica's :class:`RayBreakerStore` keeps a local mirror. The hot path only touches the
  mirror: ``get`` reads it, ``record`` applies the outcome to it at once (so a replica that
  sees five failures stops sending immediately) and queues the outcome.
* Two background tasks talk to the actor, so that no request does:

  - the **push**, every ``breaker.sync_interval_s`` while outcomes are queued, ships them and
    receives all states back in the same round trip (nothing queued: no call);
  - the **watch** is a long poll: the actor answers it as soon as its states differ from the
    version the replica holds, or after ``breaker.watch_timeout_s`` with nothing new. A breaker
    that another replica's failures opened reaches this one in one round trip, and an idle
    replica makes one call per ``watch_timeout_s`` instead of one per ``sync_interval_s``.

  Outcomes are never lost, only delayed by at most one interval (plus a round trip).
* If the actor is unreachable the replica keeps its local mirror (a per-replica breaker) and
  retries; it never blocks or fails a request because of the store.

Timestamps are wall-clock (``time.time``) because replicas on different nodes compare them;
monotonic clocks are per process. The actor is an asyncio actor (the watch waits on its event
loop); its other methods are plain functions that run on that loop one at a time, and a replica
has at most one push in flight, so its outcomes reach the actor in the order it recorded them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Callable, Optional

from ..actor_link import ActorLink
from ..config.resilience import BreakerSettings
from ..periodic import Periodic
from .breaker import BreakerPolicy, BreakerState, Clock, LocalBreakerStore, Outcome

log = logging.getLogger(__name__)

# (alias, outcome, timestamp) as shipped to the actor.
OutcomeEvent = tuple[str, str, float]
# What the actor answers a push or a watch with: {"epoch": str, "version": int,
# "states": {alias: BreakerState.as_dict()}}.
RegistryReply = dict[str, Any]


class BreakerRegistry:
    """The registry: plain Python, so tests drive it without Ray (in the cluster it lives in
    the application's state actor, :class:`serve_app.app_state.ApplicationState`)."""

    def __init__(self, settings: Optional[dict[str, Any]] = None):
        self._settings = BreakerSettings(**(settings or {}))
        self._policy = BreakerPolicy(self._settings)
        self._states: dict[str, BreakerState] = {}
        # A reply names the states it shows: this incarnation of the actor (a restarted one
        # starts over with no states, so versions of the old one mean nothing) and the change.
        self._epoch = uuid.uuid4().hex[:12]
        self._version = 0
        # One future per waiting watch (on the actor's event loop), resolved at the next change.
        self._watches: set[asyncio.Future] = set()

    def configure(self, settings: dict[str, Any]) -> None:
        # A redeploy of this application with new breaker settings reuses its detached actor:
        # adopt them. Other applications have registries of their own (registry_name).
        self._settings = BreakerSettings(**settings)
        self._policy = BreakerPolicy(self._settings)

    def settings(self) -> dict[str, Any]:
        return self._settings.model_dump()

    def sync(self, events: list[OutcomeEvent]) -> RegistryReply:
        """Apply a replica's queued outcomes; answer with every state."""
        changed = False
        for alias, outcome, at in events:
            current = self._states.get(alias)
            new = self._policy.apply(current or BreakerState(), outcome, at)  # type: ignore[arg-type]
            if new != current:
                self._states[alias] = new
                changed = True
        if changed:
            self._version += 1
            for waiting in self._watches:
                if not waiting.done():
                    waiting.set_result(None)
        return self.reply()

    async def watch(self, epoch: Optional[str], version: int, timeout_s: float) -> RegistryReply:
        """Answer once the states differ from ``version`` of ``epoch`` (at once if they already
        do), or after ``timeout_s`` with the same ones."""
        if epoch == self._epoch and version == self._version:
            # A bare future and a timer rather than wait_for: nothing else to cancel when the
            # watching replica goes away mid-wait.
            loop = asyncio.get_running_loop()
            waiting = loop.create_future()
            timer = loop.call_later(timeout_s, lambda: waiting.done() or waiting.set_result(None))
            self._watches.add(waiting)
            try:
                await waiting
            finally:
                timer.cancel()
                self._watches.discard(waiting)
        return self.reply()

    def reply(self) -> RegistryReply:
        return {"epoch": self._epoch, "version": self._version,
                "states": {alias: st.as_dict() for alias, st in self._states.items()}}

    def states(self) -> dict[str, dict[str, Any]]:
        return self.reply()["states"]


class RayBreakerStore:
    """A :class:`~serve_app.resilience.breaker.BreakerStore` backed by the shared registry.

    ``registry`` is a Ray actor handle of the application's state actor, whose ``configure``,
    ``sync`` and ``watch`` are :class:`BreakerRegistry`'s
    (:func:`serve_app.app_state.connect_application_state`); any
    object whose ``sync.remote(events)`` / ``watch.remote(epoch, version, timeout_s)`` /
    ``configure.remote(settings)`` return awaitables works, which is how the unit tests run it
    without Ray.

    ``connect`` (the gateway passes the one that made ``registry``) gets the actor again after
    a call failed (:class:`~serve_app.actor_link.ActorLink`, which says why), and the store
    sends a new incarnation its settings before anything else. Without ``connect`` it keeps
    calling ``registry``.
    """

    def __init__(self, registry: Any, settings: BreakerSettings, clock: Clock = time.time,
                 connect: Optional[Callable[[], Any]] = None):
        self._link = ActorLink(connect, registry)
        self._settings = settings
        self._mirror = LocalBreakerStore(settings, clock)
        self.policy: BreakerPolicy = self._mirror.policy
        self._pending: list[OutcomeEvent] = []
        # The link's generation the registry's settings were sent to (a new incarnation of the
        # actor may hold other settings: configure it again).
        self._configured_generation = 0
        # The registry's states the mirror holds (None / -1: none yet), and whether a push is
        # in flight (its reply, not a watch's, then brings the next states: see watch_once).
        self._epoch: Optional[str] = None
        self._version = -1
        self._pushing = False
        self.last_sync_at: Optional[float] = None
        self._push = Periodic(self.push_pending, lambda: self._settings.sync_interval_s,
                              failing="breaker registry sync failed; using local state",
                              recovered="breaker registry reachable again")
        self._watch = Periodic(self.watch_once, lambda: self._settings.sync_interval_s,
                               failing="breaker registry watch failed; using local state",
                               recovered="breaker registry watched again")

    @property
    def sync_failures(self) -> int:
        return self._push.failures + self._watch.failures

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

    # ------------------------------------------------------------------ background calls
    async def push_pending(self) -> None:
        """The push loop's step: :meth:`sync_once` when there is something to tell the registry."""
        if self._pending or not self._configured():
            await self.sync_once()

    def _configured(self) -> bool:
        return self._link.current is not None and self._configured_generation == self._link.generation

    async def sync_once(self) -> None:
        """Push queued outcomes, pull every state. Raises when the registry call fails."""
        registry = await self._link.get()
        sent: list[OutcomeEvent] = []
        try:
            if not self._configured():
                await registry.configure.remote(self._settings.model_dump())
                self._configured_generation = self._link.generation
            sent, self._pending = self._pending, []
            self._pushing = True
            reply = await registry.sync.remote(sent)
        except BaseException as exc:
            # Keep the outcomes for the next attempt, ahead of any recorded meanwhile.
            self._pending = sent + self._pending
            if isinstance(exc, Exception):
                self._link.failed(registry)
            raise
        finally:
            self._pushing = False
        self._adopt(reply)

    async def watch_once(self) -> None:
        """Wait at the registry (up to ``watch_timeout_s``) for states newer than the mirror's,
        and adopt them. Raises when the registry call fails."""
        registry = await self._link.get()
        try:
            reply = await registry.watch.remote(self._epoch, self._version, self._settings.watch_timeout_s)
        except Exception:
            self._link.failed(registry)
            raise
        if self._pushing:
            # The push's reply is at least as new as the states it was sent with, and it covers
            # the outcomes in flight, which this reply may lack. Anything newer than the push's
            # reply answers the next watch at once.
            return
        if reply["epoch"] == self._epoch and reply["version"] <= self._version:
            return  # not newer than what the mirror holds (a push answered in between)
        self._adopt(reply)

    def _adopt(self, reply: RegistryReply) -> None:
        self._epoch, self._version = reply["epoch"], reply["version"]
        self._mirror.replace_all({a: BreakerState.from_dict(d) for a, d in reply["states"].items()})
        # Outcomes recorded since the last push are not in the reply: replay them on the mirror
        # so this replica does not forget what it has just seen.
        for alias, outcome, at in self._pending:
            self._mirror.record_at(alias, outcome, at)  # type: ignore[arg-type]
        self.last_sync_at = self.now()

    def start(self) -> None:
        """Start the push and the watch on the running event loop (idempotent)."""
        self._push.start()
        self._watch.start()

    async def aclose(self) -> None:
        await self._watch.aclose()
        await self._push.aclose()
        if self._pending:
            try:
                await self.sync_once()
            except Exception as exc:
                log.warning("final breaker sync failed: %s", exc)

    def _ensure_started(self) -> None:
        if not self._push.running:
            try:
                self.start()
            except RuntimeError:
                pass  # no running loop (e.g. constructed in a sync __init__): start later
