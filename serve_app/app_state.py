"""The one actor per Serve application that holds what its replicas share.

Two kinds of state must hold across the replicas of one application (docs/architecture.md):
the breakers' states (:class:`~serve_app.resilience.breaker_ray.BreakerRegistry`, written and
watched by every ingress replica) and the requests waiting in the ingress's admission lines
(:class:`~deployments.gateway_demand.GatewayDemandBoard`, written by every ingress replica, read
by every model replica's autoscaling report). Each is a plain class, tested without Ray; this
module puts both bodies in **one** named, detached actor, ``horizon-state.v2:<app>``
(:func:`~serve_app.app_scoped.state_actor_name`).

Why one actor: each of them is called a few times a second at most, so one process serves both
with room to spare, while each actor costs a process of its own even when nobody calls it. Two
actors held 243 MiB of PSS and kept 2.2 % of a core busy while idle; this one holds 126 MiB and
1.2 % (docs/benchmarks.md "One actor for the application's shared state").
A restart (``max_restarts=-1``) starts both over together, from the arguments the actor was
created with (the breaker settings among them): a new registry epoch, which every replica's
mirror already handles, and an empty board, which fills again within one report.

The actor's methods are the two bodies' remote calls, written out one by one: a caller keeps
calling ``sync`` or ``report`` on the handle it is given, and neither body knows of the other.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from deployments.gateway_demand import GatewayDemandBoard
from .app_scoped import (CHECK_INTERVAL_S, NAMESPACE, end_with_application, retire_superseded_actors,
                         state_actor_name)
from .resilience.breaker_ray import BreakerRegistry, OutcomeEvent, RegistryReply


class ApplicationState:
    """The actor's body: a breaker registry and a demand board (an asyncio actor: the breaker
    watch waits on its event loop; every other method is a plain function run on that loop)."""

    def __init__(self, app_name: Optional[str] = None, watch_interval_s: float = CHECK_INTERVAL_S,
                 breaker_settings: Optional[dict[str, Any]] = None):
        self.app_name = app_name
        self.breakers = BreakerRegistry(breaker_settings)
        self.demand = GatewayDemandBoard()
        # As a detached actor of a Serve application: end once the application is deleted, and
        # retire the actors an earlier version of the code left (serve_app.app_scoped).
        end_with_application(app_name, interval_s=watch_interval_s,
                             while_running=self.retire_superseded_if_in_use)

    def retire_superseded_if_in_use(self) -> list[str]:
        """Called by the watch's thread while the application runs: when replicas of this code
        report here, no replica needs an actor of an earlier name, so end those. Nothing while
        nobody reports (a rollback to older code: its actors are the ones in use, and one of
        protocol 2 or later retires this one the same way)."""
        if not self.app_name or not self.demand.reported_lately():
            return []
        return retire_superseded_actors(self.app_name)

    # ------------------------------------------------------------------ breaker registry
    def configure(self, settings: dict[str, Any]) -> None:
        self.breakers.configure(settings)

    def settings(self) -> dict[str, Any]:
        return self.breakers.settings()

    def sync(self, events: list[OutcomeEvent]) -> RegistryReply:
        return self.breakers.sync(events)

    async def watch(self, epoch: Optional[str], version: int, timeout_s: float) -> RegistryReply:
        return await self.breakers.watch(epoch, version, timeout_s)

    def states(self) -> dict[str, dict[str, Any]]:
        return self.breakers.states()

    # ------------------------------------------------------------------ demand board
    def report(self, source: str, waiting: Mapping[str, float],
               routing: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
        return self.demand.report(source, waiting, routing)

    def waiting(self, deployment: str) -> float:
        return self.demand.waiting(deployment)

    def ingress(self) -> dict[str, Any]:
        return self.demand.ingress()

    def snapshot(self) -> dict[str, Any]:
        return self.demand.snapshot()


def connect_application_state(app_name: Optional[str], breaker_settings: Optional[dict[str, Any]] = None,
                              watch_interval_s: float = CHECK_INTERVAL_S) -> Any:
    """Get or create ``app_name``'s state actor (call inside a Ray worker). ``breaker_settings``
    are the registry's until a replica configures it, and again after Ray restarts the actor
    (Ray re-runs the constructor with the creating call's arguments)."""
    import ray  # local import: the plain classes above are used where Ray is not running

    # No task events: replicas call it several times a second for as long as the application
    # runs, and Ray's GCS keeps each call's events (≈ 3 KB) up to 100,000 tasks: a steady climb
    # of memory that buys nothing (loadtests/bench_task_events.py, docs/benchmarks.md "Memory").
    # No CPU reserved: its calls are small, and a reserved core would be taken from the models.
    return ray.remote(ApplicationState).options(
        name=state_actor_name(app_name), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True, num_cpus=0, max_restarts=-1, enable_task_events=False).remote(
            app_name=app_name, watch_interval_s=watch_interval_s, breaker_settings=breaker_settings)
