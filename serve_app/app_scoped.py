"""The detached actor of a Serve application: its name, and its end once the application is gone.

The gateway keeps one named, detached actor per application (``horizon-state.v1:<app>``,
:mod:`serve_app.app_state`): it holds the state the application's replicas share, the breaker
registry and the demand board. Detached, because it must outlive any one ingress replica (a
rolling update replaces every replica; the breaker states and the backlog figures carry over).
One actor, not one per kind of state: an idle actor costs a process, ≈ 120 MiB of PSS and about
one percent of a core (docs/benchmarks.md, "One actor for the application's shared state").
But nothing in Serve ends it when its application is deleted: ``serve delete canary`` on a
shared cluster, or a test's short-lived application, would leave an idle process behind for as
long as the cluster runs.

So it watches its application: every :data:`CHECK_INTERVAL_S` it asks Serve for the
applications' status, and after :data:`ABSENT_CHECKS` checks in a row without its own it ends
itself (no restart). A check that fails (the controller is restarting, the head is busy) is
no evidence either way and changes nothing. So after ``serve shutdown`` (the controller gone,
every check failing) it stays until Ray stops, as before; ``horizon stop`` stops Ray.

Why not Serve's own deployment-scoped actors (``deployment_actors``, alpha in Ray 2.60): Serve
scopes each to one deployment *and its code version*, and a replica finds it with
``serve.get_deployment_actor`` only from that deployment. The demand board is read by every
model deployment, not only the ingress that writes it; and a new code version would start a
fresh registry, so a rolling update would forget the open breakers it should carry over.

Why there is no race with a new application of the same name: its ingress replicas get the
actor by name only after the controller has accepted the application, and from then on the
status shows it; an actor that ends has just seen the application absent.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 15.0
ABSENT_CHECKS = 2

NAMESPACE = "horizon"
STATE_ACTOR_PREFIX = "horizon-state"
# In the actor's name: it outlives the replicas of an application whose code is upgraded in
# place, and a replica must not call an actor of another protocol. Bump it whenever a method
# of serve_app.app_state.ApplicationState changes what it takes or answers.
STATE_PROTOCOL = 1


def state_actor_name(app_name: Optional[str]) -> str:
    """The shared-state actor's name for the Serve application ``app_name`` (None: outside Serve)."""
    prefix = f"{STATE_ACTOR_PREFIX}.v{STATE_PROTOCOL}"
    return f"{prefix}:{app_name}" if app_name else prefix


class ApplicationWatch:
    """Counts the checks in a row that found the application absent; says when to end."""

    def __init__(self, absent_checks: int = ABSENT_CHECKS):
        if absent_checks < 1:
            raise ValueError("absent_checks must be at least 1")
        self.absent_checks = absent_checks
        self.absent_in_a_row = 0

    def observe(self, present: Optional[bool]) -> bool:
        """``present``: the application was in Serve's status (None: the check failed).
        True when the actor should end now."""
        if present is None:
            return False
        self.absent_in_a_row = 0 if present else self.absent_in_a_row + 1
        return self.absent_in_a_row >= self.absent_checks


def serve_application_present(app_name: str) -> Optional[bool]:
    """Whether Serve lists ``app_name`` (deploying, running, unhealthy or deleting all count);
    None when Serve could not be asked."""
    try:
        from ray import serve

        return app_name in serve.status().applications
    except Exception as exc:  # noqa: BLE001 — no evidence either way
        log.debug("status of Serve application %s unknown: %s", app_name, exc)
        return None


def _end_this_actor() -> None:
    import ray

    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


def _inside_an_actor() -> bool:
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001
        return False


def end_with_application(app_name: Optional[str], *, interval_s: float = CHECK_INTERVAL_S,
                         absent_checks: int = ABSENT_CHECKS,
                         present: Callable[[str], Optional[bool]] = serve_application_present,
                         end: Callable[[], None] = _end_this_actor,
                         only_inside_an_actor: bool = True) -> Optional[threading.Thread]:
    """Start the watch of ``app_name`` in a daemon thread of the calling actor; returns the
    thread, or None when there is nothing to watch (no application name: an actor used outside
    Serve; or, with ``only_inside_an_actor``, the class built in-process, as unit tests do)."""
    if not app_name or (only_inside_an_actor and not _inside_an_actor()):
        return None
    watch = ApplicationWatch(absent_checks)

    def run() -> None:
        while True:
            time.sleep(interval_s)
            if watch.observe(present(app_name)):
                log.info("Serve application %s is gone: ending its actor", app_name)
                end()
                return

    thread = threading.Thread(target=run, name=f"watch-{app_name}", daemon=True)
    thread.start()
    return thread
