"""The gateway's backlog per model deployment, for the autoscaler: the ingress publishes it,
model replicas report it.

Requests that wait for an engine slot wait in the ingress's priority line (admission holds
each model's line there so that priority, not Serve's FIFO, decides who goes next). Ray
Serve's autoscaler only hears from a deployment's own replicas and handles, so that backlog
would be invisible to the model's policy. It travels in three hops:

1. every ingress replica in rotation reports ``{deployment: requests waiting in its line}`` to
   the board (:class:`GatewayDemandBoard`), which lives in the Serve application's one state
   actor (``horizon-state.v2:<app>``, :mod:`serve_app.app_state`), every
   :data:`PUBLISH_INTERVAL_S` (:class:`DemandPublisher`, one remote call per interval);
2. each model replica's ``record_autoscaling_stats`` reads its deployment's total from the
   board (:class:`GatewayDemandReader`) and reports it as the custom metric
   :data:`GATEWAY_WAITING` beside the engine's own counts;
3. the queue-depth policy adds the freshest ``gateway_waiting`` of the deployment's replicas
   to the queue it sizes the deployment for (``serve_app.autoscaling.signals``).

The board forgets an ingress replica that has not reported for :data:`REPORT_MAX_AGE_S` (it
stopped or died), and every hop degrades to "no gateway figure" rather than failing: a model
replica that cannot reach the board reports its engine counts only, exactly as before.

Since every ingress replica reports anyway, a report also carries the replica's routing state
(the digest of the live routing settings it routes with, and whether a change is pending), and
the board answers it with the roll call of every replica that reported lately
(:meth:`GatewayDemandBoard.ingress`). So any replica's ``/health`` can say whether *every*
ingress replica took a change of the live settings, which no single replica's answer can, and
each replica sizes its share of every model's admission line by the replicas in the roll call.

This module is plain Python apart from the actor lookups, so the unit tests run the board,
the publisher and the reader without Ray.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Awaitable, Callable, Mapping, Optional

from serve_app.actor_link import ActorLink, ActorUnreachable
from serve_app.app_scoped import NAMESPACE, state_actor_name
from serve_app.periodic import Periodic

# The custom autoscaling metric a model replica reports (read by serve_app.autoscaling.signals).
GATEWAY_WAITING = "gateway_waiting"

# How often an ingress replica reports its lines, and how long a report counts.
PUBLISH_INTERVAL_S = 0.5
REPORT_MAX_AGE_S = 3.0
# A model replica's read of the board; a replica that finds no board looks again this much later.
READ_TIMEOUT_S = 0.5
LOOKUP_RETRY_S = 5.0


class GatewayDemandBoard:
    """The latest report of every ingress replica, summed per deployment (plain Python; in the
    cluster it lives in the application's state actor, ``serve_app.app_state``)."""

    def __init__(self, max_age_s: float = REPORT_MAX_AGE_S, clock: Callable[[], float] = time.time):
        self._max_age_s = max_age_s
        self._clock = clock
        # source -> (when, its lines' waiting counts, its routing state)
        self._reports: dict[str, tuple[float, dict[str, float], dict[str, str]]] = {}

    def report(self, source: str, waiting: Mapping[str, float],
               routing: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
        """Keep ``source``'s latest lines and routing state; answer with :meth:`ingress`."""
        self._reports[source] = (self._clock(), {k: max(0.0, float(v)) for k, v in waiting.items()},
                                 {str(k): str(v) for k, v in (routing or {}).items()})
        return self.ingress()

    def _fresh(self) -> list[tuple[float, dict[str, float], dict[str, str]]]:
        oldest = self._clock() - self._max_age_s
        for source in [s for s, (at, _, _) in self._reports.items() if at < oldest]:
            del self._reports[source]
        return list(self._reports.values())

    def waiting(self, deployment: str) -> float:
        """Requests waiting for ``deployment`` in every ingress replica that reported lately."""
        return sum(lines.get(deployment, 0.0) for _, lines, _ in self._fresh())

    def ingress(self) -> dict[str, Any]:
        """The roll call of the ingress replicas that reported lately: how many, and how many
        route with each routing-settings digest and are in each routing state (``ready``,
        ``starting``, or a change ``pending`` / ``failed``)."""
        fresh = self._fresh()
        return {"replicas": len(fresh),
                "routing_settings": _count(r.get("routing_settings") for _, _, r in fresh),
                "routing": _count(r.get("routing") for _, _, r in fresh)}

    def reported_lately(self) -> bool:
        """Whether any ingress replica reported within the last ``max_age_s``. Safe to call from
        another thread than the reports' (it copies the reports and changes nothing)."""
        oldest = self._clock() - self._max_age_s
        return any(at >= oldest for at, _, _ in list(self._reports.values()))

    def snapshot(self) -> dict[str, Any]:
        fresh = self._fresh()
        return {"sources": len(fresh),
                "waiting": {d: self.waiting(d) for _, lines, _ in fresh for d in lines}}


def _count(values) -> dict[str, int]:
    """How often each value occurs, None left out, in sorted order (a stable JSON shape)."""
    out: dict[str, int] = {}
    for v in values:
        if v is not None:
            out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


class DemandPublisher:
    """One ingress replica's reporter: every interval, its lines' waiting counts (and its routing
    state) to the board, whose answer, the roll call of all ingress replicas, it keeps.

    ``lines`` returns ``{deployment: waiting}``; ``routing`` (settable after construction: the
    gateway it reports for is built later) returns the replica's routing state; ``connect``
    returns the board (an actor handle, or anything whose ``report.remote(source, waiting,
    routing)`` is awaitable). It is called in a thread when the board is first needed and again
    after a failed report (:class:`~serve_app.actor_link.ActorLink`): the gateway's ``connect``
    gets *or creates* the state actor, so this is what makes one that ended for good again.
    """

    def __init__(self, lines: Callable[[], Mapping[str, float]], connect: Callable[[], Any], *,
                 source: Optional[str] = None, interval_s: float = PUBLISH_INTERVAL_S,
                 routing: Optional[Callable[[], Mapping[str, str]]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self._lines = lines
        self._board_link = ActorLink(connect)
        self.routing = routing
        # Called after every report, answered or not, with :attr:`roll_call` (settable, as
        # ``routing``): the gateway sizes its admission lines by it.
        self.on_roll_call: Optional[Callable[[Optional[dict[str, Any]]], None]] = None
        self._clock = clock
        self._roll_call: tuple[float, Optional[dict[str, Any]]] = (0.0, None)
        self.source = source or uuid.uuid4().hex[:12]
        self.interval_s = interval_s
        self._loop = Periodic(self.publish_once, interval_s,
                              failing="gateway demand not published; models scale on their own queues until it is",
                              recovered="gateway demand board reachable again")

    @property
    def failures(self) -> int:
        return self._loop.failures

    @property
    def roll_call(self) -> Optional[dict[str, Any]]:
        """The board's latest roll call of the ingress replicas (:meth:`GatewayDemandBoard.ingress`),
        None before the first answer or once it is older than a report counts (the board is
        not reachable)."""
        at, roll_call = self._roll_call
        return roll_call if self._clock() - at <= REPORT_MAX_AGE_S else None

    async def publish_once(self) -> None:
        try:
            await self._report()
        finally:
            # Answered or not (no board to connect to, a failed report): a roll call older
            # than a report counts is None, and the gateway goes back to Serve's count.
            if self.on_roll_call is not None:
                self.on_roll_call(self.roll_call)

    async def _report(self) -> None:
        board = await self._board_link.get()
        routing = dict(self.routing()) if self.routing is not None else {}
        try:
            answer = await board.report.remote(self.source, dict(self._lines()), routing)
        except BaseException:
            self._board_link.failed(board)
            raise
        if isinstance(answer, dict):
            self._roll_call = (self._clock(), answer)

    def start(self) -> None:
        self._loop.start()

    async def aclose(self) -> None:
        await self._loop.aclose()


def _lookup_board(app_name: Optional[str]) -> Any:
    import ray  # here: the module's plain-Python parts are imported where Ray is not running

    return ray.get_actor(state_actor_name(app_name), namespace=NAMESPACE)


class GatewayDemandReader:
    """A model replica's view of the board: its deployment's backlog at the gateway.

    :meth:`read` never raises: None when there is no board (a deployment used without the
    Horizon ingress, or before the ingress started) or it did not answer within
    :data:`READ_TIMEOUT_S`; the replica then reports its engine counts only.
    """

    def __init__(self, deployment: str, app_name: Optional[str], *,
                 lookup: Optional[Callable[[], Any]] = None, clock: Callable[[], float] = time.monotonic,
                 timeout_s: float = READ_TIMEOUT_S, retry_s: float = LOOKUP_RETRY_S):
        self.deployment = deployment
        self._timeout_s = timeout_s
        self._board_link = ActorLink(lookup or (lambda: _lookup_board(app_name)),
                                     timeout_s=timeout_s, retry_s=retry_s, clock=clock)

    @classmethod
    def for_this_replica(cls) -> Optional["GatewayDemandReader"]:
        """The reader of the Serve replica this runs in (None outside a replica)."""
        from ray import serve  # see _lookup_board

        try:
            ctx = serve.get_replica_context()
        except Exception:  # noqa: BLE001 — not inside a Serve replica
            return None
        return cls(ctx.deployment, ctx.app_name)

    async def read(self) -> Optional[float]:
        try:
            board = await self._board_link.get()
        except ActorUnreachable:  # no board (yet): the link looks again after its back-off
            return None
        try:
            return float(await asyncio.wait_for(_awaitable(board.waiting.remote(self.deployment)),
                                                self._timeout_s))
        except Exception:  # noqa: BLE001 — a dead or slow board: drop the handle, look again later
            self._board_link.failed(board)
            return None


def _awaitable(ref: Any) -> Awaitable[Any]:
    """A Ray ObjectRef is awaitable but not a coroutine; wait_for needs a future or coroutine."""
    async def wait() -> Any:
        return await ref
    return wait()


async def replica_autoscaling_stats(engine: Mapping[str, float],
                                    reader: Optional[GatewayDemandReader]) -> dict[str, float]:
    """The engine's custom metrics plus :data:`GATEWAY_WAITING` when the board answered."""
    out = dict(engine)
    if reader is not None:
        waiting = await reader.read()
        if waiting is not None:
            out[GATEWAY_WAITING] = waiting
    return out
