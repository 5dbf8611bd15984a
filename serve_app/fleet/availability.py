"""Which model deployments are running, as the ingress last heard it from Serve's controller.

A handle call to a deployment that has no replica does not fail: Serve queues it until a
replica exists, which for a replica that cannot be scheduled is forever. So the ingress keeps a
board of deployment states, refreshed in the background from Serve's controller, and a call to a
deployment that is not up fails at once with a 503 that names the deployment and Serve's reason.

The states come from the controller's instance details, read as the plain dict it sends.
``serve.status()`` would rebuild them as Serve's config models first, and that validation
cloudpickles every deployment's request-router class and autoscaling policy: 60–120 ms of
the ingress's CPU per read, with the GIL held, so every request in flight stalled behind
it (13 % of the ingress's CPU when read every 2 s; docs/benchmarks.md). The board reads every
``refresh_s`` while some deployment is not up, every ``steady_refresh_s`` once all are, and again
soon after a call finds a model unavailable.

"Not up" is narrow on purpose: no running replica *and* a state that is not a healthy one.
A deployment scaled to zero is HEALTHY (or UPSCALING) with no replica; a call to it must wait
for the replica Serve starts for it, so it is let through.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ..errors import DeploymentNotRunning

log = logging.getLogger("ray.serve")

# States in which a deployment with no running replica will not get one by waiting for it.
NOT_UP_STATES = frozenset({"UPDATING", "UNHEALTHY", "DEPLOY_FAILED"})


@dataclass(frozen=True)
class DeploymentState:
    status: str
    running: int
    message: str = ""

    @property
    def up(self) -> bool:
        return self.running > 0 or self.status not in NOT_UP_STATES

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "replicas": self.running}
        if self.message and not self.up:
            out["reason"] = " ".join(self.message.split())
        return out


def _name(value: Any) -> str:
    return str(getattr(value, "value", value)).rsplit(".", 1)[-1]


def states_from_details(details: Mapping[str, Any], app_name: Optional[str] = None
                        ) -> dict[str, DeploymentState]:
    """Deployment name → state, from the controller's instance details (the dict behind
    ``serve.status()``: applications → deployments → status, message, replicas[].state)."""
    out: dict[str, DeploymentState] = {}
    for name, app in (details.get("applications") or {}).items():
        if app_name is not None and name != app_name:
            continue
        for dep_name, dep in (app.get("deployments") or {}).items():
            running = sum(1 for r in dep.get("replicas") or () if _name(r.get("state")) == "RUNNING")
            out[dep_name] = DeploymentState(_name(dep.get("status")), running, dep.get("message") or "")
    return out


def read_serve_status(app_name: Optional[str] = None) -> dict[str, DeploymentState]:
    """Deployment name → state, from the Serve controller (blocking; run it in a thread)."""
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    return {} if client is None else states_from_details(client.get_serve_details(), app_name)


class DeploymentBoard:
    """The latest deployment states, and the fail-fast check made before each model call."""

    def __init__(self, read: Callable[[], Mapping[str, DeploymentState]] = read_serve_status,
                 refresh_s: float = 2.0, steady_refresh_s: float = 20.0, retry_after_s: float = 5.0):
        self._read = read
        self.refresh_s = refresh_s
        self.steady_refresh_s = steady_refresh_s
        self.retry_after_s = retry_after_s
        self._nudged = asyncio.Event()
        self._states: dict[str, DeploymentState] = {}
        # Deployments seen with a running replica at least once: until then they are "starting".
        self._seen_up: set[str] = set()
        self._updated = 0.0
        self._task: Optional[asyncio.Task] = None
        self._listeners: list[Callable[[Mapping[str, DeploymentState]], None]] = []
        self._backlog: Callable[[], bool] = lambda: False

    def subscribe(self, listener: Callable[[Mapping[str, DeploymentState]], None]) -> None:
        """Call ``listener(states)`` after every update (the admission lines follow replicas)."""
        self._listeners.append(listener)

    def watch_backlog(self, waiting: Callable[[], bool]) -> None:
        """While ``waiting()`` is true (requests wait in an admission line), read the states at
        the fast cadence even when every deployment is up: the autoscaler is likely adding
        replicas, and the lines only grow with them once this board has seen them running."""
        self._backlog = waiting

    @property
    def states(self) -> dict[str, DeploymentState]:
        return dict(self._states)

    def get(self, deployment: str) -> Optional[DeploymentState]:
        return self._states.get(deployment)

    def update(self, states: Mapping[str, DeploymentState]) -> None:
        self._states = dict(states)
        self._seen_up.update(name for name, st in self._states.items() if st.running > 0)
        self._updated = time.monotonic()
        for listener in self._listeners:
            try:
                listener(self._states)
            except Exception:  # noqa: BLE001 — a listener must not stop the board
                log.exception("deployment board listener failed")

    def started(self, deployment: str) -> bool:
        """Whether ``deployment`` has had a running replica since this board began watching."""
        return deployment in self._seen_up

    async def refresh(self) -> None:
        try:
            self.update(await asyncio.to_thread(self._read))
        except Exception as exc:  # noqa: BLE001 — a slow controller must not break requests
            log.warning("deployment states not refreshed: %s", exc)

    def start(self) -> None:
        """Refresh in the background on the running event loop (the replica's)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    @property
    def all_up(self) -> bool:
        return bool(self._states) and all(st.up and st.status == "HEALTHY" for st in self._states.values())

    def nudge(self) -> None:
        """Something looks wrong (a model was unavailable): read the states again soon."""
        self._nudged.set()

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            self._nudged.clear()
            # Every refresh_s while anything is not up; once all are up, every steady_refresh_s
            # (each read makes the controller build every deployment's details), unless a nudge
            # or a backlog says the states are likely changing.
            steady, waited = self.all_up, 0.0
            while True:
                try:
                    await asyncio.wait_for(self._nudged.wait(), self.refresh_s)
                    await asyncio.sleep(self.refresh_s)    # at most one read per refresh_s
                    break
                except asyncio.TimeoutError:
                    waited += self.refresh_s
                if not steady or waited >= self.steady_refresh_s or self._has_backlog():
                    break

    def _has_backlog(self) -> bool:
        try:
            return bool(self._backlog())
        except Exception:  # noqa: BLE001 — a failing probe must not stop the board
            log.exception("backlog probe failed")
            return False

    def check(self, deployment: str, alias: str) -> None:
        """Raise a 503 naming ``deployment`` when it has no replica and is not getting one."""
        state = self._states.get(deployment)
        if state is None or state.up:
            return
        reason = " ".join(state.message.split()) or "its replica has not started yet"
        raise DeploymentNotRunning(
            f"model {alias!r} is not running: deployment {deployment!r} is {state.status} with no "
            f"running replica ({reason})", retry_after=self.retry_after_s,
            details={"model": alias, "deployment": deployment, "deployment_status": state.status})
