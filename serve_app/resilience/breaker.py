"""Circuit breaker per model: the state machine, where its state lives, and the per-call gate.

States (SPEC §6):

* ``closed``: every request passes. ``failure_threshold`` *consecutive* failures whose first
  one is no older than ``window_s`` open it; a success, or a streak that outlives the window,
  starts the count again. One slow wobble therefore never trips it (the seed's over-sensitive
  breaker pushed all traffic onto the backup path and took K2 down).
* ``open``: nothing passes until ``probe_interval_s`` has elapsed since it opened.
* ``half_open``: trial traffic only, recovering in ``recovery_steps`` steps. At step *k* (from
  0) at most ``half_open_max_inflight * (k + 1)`` trials are in flight per ingress replica;
  each successful trial moves one step up, the last one closes the breaker. Any failed trial
  re-opens it and the next probe waits another ``probe_interval_s``.

The transitions are pure functions of (state, settings, event, time) in :class:`BreakerPolicy`
so every store applies exactly the same rules. A :class:`BreakerStore` holds the state of all
models; :class:`LocalBreakerStore` keeps it in process, ``RayBreakerStore``
(:mod:`serve_app.resilience.breaker_ray`) shares it between ingress replicas through one named
Ray actor. :class:`CircuitBreaker` is what a call goes through: it reads the store and counts
this replica's half-open trials.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Protocol

from ..config.resilience import BreakerSettings
from ..errors import (ContextLengthExceeded, HorizonError, InvalidRequest, ModelNotFound,
                      RateLimited)

Clock = Callable[[], float]
BreakerStateName = Literal["closed", "open", "half_open"]
Outcome = Literal["success", "failure"]


@dataclass(frozen=True)
class BreakerState:
    """The shared facts about one model's breaker (small, immutable, cheap to ship)."""

    state: BreakerStateName = "closed"
    consecutive_failures: int = 0
    # When the current failure streak began (closed) / when the breaker last opened (open).
    streak_started_at: Optional[float] = None
    opened_at: Optional[float] = None
    recovery_step: int = 0
    # Times it has opened; lets /health and metrics show flapping.
    open_count: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "BreakerState":
        return cls(**data)


class BreakerPolicy:
    """The state machine: pure transitions, no storage, no clock of its own."""

    def __init__(self, settings: BreakerSettings):
        self.settings = settings

    def current(self, state: BreakerState, now: float) -> BreakerState:
        """The state as of ``now``: an open breaker whose probe time came is half-open."""
        if state.state == "open" and state.opened_at is not None \
                and now - state.opened_at >= self.settings.probe_interval_s:
            return dataclasses.replace(state, state="half_open", recovery_step=0)
        return state

    def on_success(self, state: BreakerState, now: float) -> BreakerState:
        state = self.current(state, now)
        if state.state == "half_open":
            step = state.recovery_step + 1
            if step >= self.settings.recovery_steps:
                return BreakerState(open_count=state.open_count)
            return dataclasses.replace(state, recovery_step=step)
        if state.state == "open":
            # A late success of a call admitted before the breaker opened: the model may be
            # back, but recovery still goes through the probe and the half-open steps.
            return state
        return BreakerState(open_count=state.open_count)

    def on_failure(self, state: BreakerState, now: float) -> BreakerState:
        state = self.current(state, now)
        s = self.settings
        if state.state == "half_open":
            return self._opened(state, now)
        if state.state == "open":
            return state
        streak_start = state.streak_started_at
        count = state.consecutive_failures
        if streak_start is None or now - streak_start > s.window_s:
            # The old streak is outside the window: this failure starts a new one.
            streak_start, count = now, 0
        count += 1
        if count >= s.failure_threshold:
            return self._opened(state, now)
        return dataclasses.replace(state, consecutive_failures=count, streak_started_at=streak_start)

    def apply(self, state: BreakerState, outcome: Outcome, now: float) -> BreakerState:
        return self.on_success(state, now) if outcome == "success" else self.on_failure(state, now)

    def trial_limit(self, state: BreakerState) -> int:
        """Half-open trials one replica may have in flight at this recovery step."""
        return self.settings.half_open_max_inflight * (state.recovery_step + 1)

    def retry_after_s(self, state: BreakerState, now: float) -> float:
        """Seconds until an open breaker probes again (0 when not open)."""
        if state.state != "open" or state.opened_at is None:
            return 0.0
        return max(0.0, state.opened_at + self.settings.probe_interval_s - now)

    @staticmethod
    def _opened(state: BreakerState, now: float) -> BreakerState:
        return BreakerState(state="open", opened_at=now, open_count=state.open_count + 1)


def is_model_failure(exc: BaseException) -> bool:
    """Does this error say something about the model's health?

    Client mistakes (bad request, context too long, unknown model) and back-pressure (our own
    or Ray Serve's full queue) are not the model failing: counting them would open breakers
    on healthy models under load, the over-sensitivity the seed warns about.
    """
    if isinstance(exc, (InvalidRequest, ContextLengthExceeded, ModelNotFound, RateLimited)):
        return False
    if isinstance(exc, HorizonError):
        return exc.status >= 500
    return isinstance(exc, Exception)


class BreakerStore(Protocol):
    """Where breaker state lives. Both calls are on the request hot path: they must answer
    from local memory and never wait on the network."""

    policy: BreakerPolicy

    def now(self) -> float:
        """The clock the stored timestamps use."""

    def get(self, alias: str) -> BreakerState:
        """The latest known state of ``alias`` (raw: time-based transitions not applied)."""

    def record(self, alias: str, outcome: Outcome) -> None:
        """Report a call's outcome; applied locally at once, shared as the store can."""


class LocalBreakerStore:
    """In-process state: one ingress replica, tests, and the mirror inside RayBreakerStore."""

    def __init__(self, settings: BreakerSettings, clock: Clock = time.monotonic):
        self.policy = BreakerPolicy(settings)
        self._clock = clock
        self._states: dict[str, BreakerState] = {}

    def now(self) -> float:
        return self._clock()

    def get(self, alias: str) -> BreakerState:
        return self._states.get(alias, BreakerState())

    def record(self, alias: str, outcome: Outcome) -> None:
        self.record_at(alias, outcome, self.now())

    def record_at(self, alias: str, outcome: Outcome, at: float) -> None:
        self._states[alias] = self.policy.apply(self.get(alias), outcome, at)

    def replace_all(self, states: dict[str, BreakerState]) -> None:
        self._states = dict(states)

    def all(self) -> dict[str, BreakerState]:
        return dict(self._states)


class BreakerPermit:
    """One admitted call. Report exactly one of success / failure / release (neutral)."""

    def __init__(self, breaker: "CircuitBreaker", trial: bool):
        self._breaker = breaker
        self.trial = trial
        self._done = False

    def success(self) -> None:
        self._finish("success")

    def failure(self) -> None:
        self._finish("failure")

    def release(self) -> None:
        """The call ended without saying anything about the model (client error, cancel)."""
        self._finish(None)

    def _finish(self, outcome: Optional[Outcome]) -> None:
        if self._done:
            return
        self._done = True
        self._breaker._finished(self, outcome)


class CircuitBreaker:
    """The breaker of one model as seen by this replica: gate calls, report outcomes."""

    def __init__(self, alias: str, store: BreakerStore):
        self.alias = alias
        self.store = store
        self._trials_in_flight = 0

    def state(self) -> BreakerState:
        return self.store.policy.current(self.store.get(self.alias), self.store.now())

    def allows(self) -> bool:
        """Would a call be admitted now? (No reservation; used before queueing.)"""
        st = self.state()
        if st.state == "closed":
            return True
        if st.state == "open":
            return False
        return self._trials_in_flight < self.store.policy.trial_limit(st)

    def try_acquire(self) -> Optional[BreakerPermit]:
        """Admit one call, or None when the breaker is open / its trial slots are taken."""
        st = self.state()
        if st.state == "closed":
            return BreakerPermit(self, trial=False)
        if st.state == "half_open" and self._trials_in_flight < self.store.policy.trial_limit(st):
            self._trials_in_flight += 1
            return BreakerPermit(self, trial=True)
        return None

    def retry_after_s(self) -> float:
        return self.store.policy.retry_after_s(self.store.get(self.alias), self.store.now())

    def snapshot(self) -> dict:
        st = self.state()
        return {"state": st.state, "consecutive_failures": st.consecutive_failures,
                "recovery_step": st.recovery_step, "open_count": st.open_count,
                "trials_in_flight": self._trials_in_flight,
                "retry_after_s": round(self.retry_after_s(), 3)}

    def _finished(self, permit: BreakerPermit, outcome: Optional[Outcome]) -> None:
        if permit.trial:
            self._trials_in_flight -= 1
        if outcome is not None:
            self.store.record(self.alias, outcome)
