"""Bounded priority admission in front of one model engine (per ingress replica).

Ray Serve's own queue in front of a deployment (``max_queued_requests``) is FIFO: a burst of
long reasoning requests makes every short chat request wait behind them (the seed's starving
incident). So the ingress keeps the waiting line itself: at most ``capacity`` requests go to the
engine at once, the rest wait here ordered by priority class (from config by task type; lower
is served first), then by arrival.

``capacity`` follows the deployment: this replica's share of the engine slots of the model's
*running* replicas (:meth:`PriorityAdmission.resize`, driven by the deployment board), so a
replica that the autoscaler adds takes work as soon as it runs. What waits here is reported to
the model's autoscaler (``deployments.gateway_demand``): holding the backlog in the ingress
for priority's sake must not hide it from scaling. The line is bounded: past ``max_queue_size`` waiting, or after
``max_wait_s`` in line, a request gets :class:`~serve_app.errors.RateLimited` with a
Retry-After taken from the estimated wait. Optional aging lifts a waiting request one class per
``priority_aging_s`` so steady high-priority load cannot starve the rest forever.

The estimated queue wait feeds health-aware degradation and the autoscaling metrics.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from ..autoscaling.options import replica_slots
from ..config.models import ModelSettings
from ..config.resilience import RetryAfterSettings
from ..config.schema import HorizonConfig
from ..errors import RateLimited
from .breaker import Clock

# Weight of the newest observation in the service-time average.
_SERVICE_EWMA_ALPHA = 0.2


def default_capacity(model: ModelSettings) -> int:
    """Requests one replica of ``model`` is sent at once when the profile sets no capacity.

    The engine's decoding slots, so nothing waits in the engine's FIFO queue and the priority
    line decides every start; the queue-depth policy sees this line through the demand board.
    Ray's ongoing-requests policy only sees what reaches the replicas, so a model scaled by it
    is sent up to ``max_ongoing_requests`` (its backlog beyond that still waits here in order).
    """
    if model.scaling.autoscaling and model.scaling.policy == "ongoing_requests":
        return model.scaling.max_ongoing_requests
    return replica_slots(model)


def line_per_replica(config: HorizonConfig, alias: str) -> int:
    """Requests the gateway's line for ``alias``'s engine sends one of its replicas at once: the
    profile's ``capacity``, else :func:`default_capacity`. The model's deployment is given no
    more than this as Serve's ``max_ongoing_requests`` (``serve_app.autoscaling.options``)."""
    return config.resilience.admission_for(alias).capacity or default_capacity(config.model(alias))


@dataclass(eq=False)
class _Waiter:
    seq: int
    priority: int
    enqueued_at: float
    granted: asyncio.Future = field(repr=False)


class AdmissionSlot:
    """A place among the ``capacity`` requests in flight; release it exactly once."""

    def __init__(self, owner: "PriorityAdmission", started_at: float, waited_s: float):
        self._owner = owner
        self.started_at = started_at
        self.waited_s = waited_s
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._owner._release(self)

    async def __aenter__(self) -> "AdmissionSlot":
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.release()


class PriorityAdmission:
    def __init__(self, name: str, capacity: int, max_queue_size: int, *,
                 max_wait_s: Optional[float] = None, aging_s: Optional[float] = None,
                 service_time_hint_s: Optional[float] = None,
                 retry_after: RetryAfterSettings = RetryAfterSettings(),
                 clock: Clock = time.monotonic):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.name = name
        self.capacity = capacity
        self.max_queue_size = max_queue_size
        self.max_wait_s = max_wait_s
        self.aging_s = aging_s
        self.retry_after = retry_after
        self._clock = clock
        self._service_s = service_time_hint_s
        self._in_flight = 0
        # One FIFO line per priority class: the head of each line is its oldest waiter, so
        # picking the next request only compares heads (a handful of classes).
        self._lines: dict[int, deque[_Waiter]] = {}
        self._waiting = 0
        self._seq = 0
        self.admitted_total = 0
        self.rejected_total = 0

        # Slots of one model replica (for the whole gateway); ``capacity`` is this ingress
        # replica's share of the running replicas' slots (resize).
        self.per_model_replica = capacity
        self.model_replicas = 1
        self.ingress_replicas = 1

    @classmethod
    def from_config(cls, config: HorizonConfig, alias: str, clock: Clock = time.monotonic) -> "PriorityAdmission":
        res = config.resilience
        settings = res.admission_for(alias)
        return cls(alias, line_per_replica(config, alias), settings.max_queue_size, max_wait_s=settings.max_wait_s,
                   aging_s=res.priority_aging_s, service_time_hint_s=settings.service_time_hint_s,
                   retry_after=res.retry_after, clock=clock)

    def resize(self, model_replicas: int, ingress_replicas: int) -> None:
        """Follow the deployment: ``per_model_replica`` slots for each running model replica,
        shared by the running ingress replicas (rounded up: an engine may see a request or two
        more than its slots rather than leave one idle). Zero running replicas count as one, so
        a request still reaches the handle and Serve's cold start brings a replica up. Waiters
        are granted at once when the line grows; when it shrinks, requests in flight finish and
        no new one starts until the line is under the new capacity."""
        self.model_replicas = max(1, model_replicas)
        self.ingress_replicas = max(1, ingress_replicas)
        self.capacity = max(1, math.ceil(self.per_model_replica * self.model_replicas / self.ingress_replicas))
        self._grant_waiters(self._clock())

    # ------------------------------------------------------------------ observation
    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queue_length(self) -> int:
        return self._waiting

    @property
    def service_time_s(self) -> Optional[float]:
        """Average time a request holds a slot (the configured hint until one completes)."""
        return self._service_s

    def estimated_wait_s(self) -> float:
        """How long a request arriving now would wait in line.

        The larger of what the line already proves (the oldest waiter's age) and what it
        implies (waiting requests / capacity * average service time).
        """
        if self._waiting == 0:
            return 0.0
        now = self._clock()
        oldest = min(line[0].enqueued_at for line in self._lines.values() if line)
        implied = self._waiting / self.capacity * (self._service_s or 0.0)
        return max(now - oldest, implied)

    def retry_after_s(self) -> float:
        bounds = self.retry_after
        return min(bounds.max_s, max(bounds.min_s, self.estimated_wait_s()))

    def snapshot(self) -> dict:
        return {"capacity": self.capacity, "per_model_replica": self.per_model_replica,
                "model_replicas": self.model_replicas, "ingress_replicas": self.ingress_replicas,
                "in_flight": self._in_flight,
                "queue_length": self._waiting, "max_queue_size": self.max_queue_size,
                "estimated_queue_wait_s": round(self.estimated_wait_s(), 3),
                "service_time_s": None if self._service_s is None else round(self._service_s, 3),
                "admitted_total": self.admitted_total, "rejected_total": self.rejected_total}

    # ------------------------------------------------------------------ admission
    async def acquire(self, priority: int) -> AdmissionSlot:
        """Wait for a slot in priority order; RateLimited when the line is full or too slow."""
        now = self._clock()
        if self._in_flight < self.capacity and self._waiting == 0:
            return self._grant_now(now, waited_s=0.0)
        if self._waiting >= self.max_queue_size:
            self.rejected_total += 1
            raise self._overloaded(f"{self._waiting} requests already waiting "
                                   f"(max_queue_size {self.max_queue_size})")
        waiter = _Waiter(self._seq, priority, now, asyncio.get_running_loop().create_future())
        self._seq += 1
        self._lines.setdefault(priority, deque()).append(waiter)
        self._waiting += 1
        try:
            if self.max_wait_s is None:
                await asyncio.shield(waiter.granted)
            else:
                done, _ = await asyncio.wait({waiter.granted}, timeout=self.max_wait_s)
                if not done:
                    self._withdraw(waiter)
                    self.rejected_total += 1
                    raise self._overloaded(f"waited {self.max_wait_s:g} s in line without a slot")
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                # The slot was handed over just as the caller gave up: pass it on.
                waiter.granted.result().release()
            else:
                self._withdraw(waiter)
            raise
        return waiter.granted.result()

    def _grant_now(self, now: float, waited_s: float) -> AdmissionSlot:
        self._in_flight += 1
        self.admitted_total += 1
        return AdmissionSlot(self, now, waited_s)

    def _release(self, slot: AdmissionSlot) -> None:
        now = self._clock()
        held = now - slot.started_at
        self._service_s = held if self._service_s is None else (
            _SERVICE_EWMA_ALPHA * held + (1 - _SERVICE_EWMA_ALPHA) * self._service_s)
        self._in_flight -= 1
        self._grant_waiters(now)

    def _grant_waiters(self, now: float) -> None:
        while self._in_flight < self.capacity and self._waiting:
            waiter = self._pop_next(now)
            waiter.granted.set_result(self._grant_now(now, waited_s=now - waiter.enqueued_at))

    def _pop_next(self, now: float) -> _Waiter:
        def rank(w: _Waiter) -> tuple[int, int]:
            lift = math.floor((now - w.enqueued_at) / self.aging_s) if self.aging_s else 0
            return (w.priority - lift, w.seq)

        best = min((line[0] for line in self._lines.values() if line), key=rank)
        self._lines[best.priority].popleft()
        self._waiting -= 1
        return best

    def _withdraw(self, waiter: _Waiter) -> None:
        line = self._lines.get(waiter.priority)
        if line is not None and waiter in line:
            line.remove(waiter)
            self._waiting -= 1
        if not waiter.granted.done():
            waiter.granted.cancel()

    def _overloaded(self, why: str) -> RateLimited:
        retry = self.retry_after_s()
        return RateLimited(f"model {self.name} is overloaded: {why}; retry after about "
                           f"{max(1, round(retry))} s",
                           retry_after=retry, details={"model": self.name, "queue_length": self._waiting})
