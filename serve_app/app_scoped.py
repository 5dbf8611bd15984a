"""The detached actor of a Serve application: its name, its end once the application is gone, and
the end of the actors an earlier version of the code left behind.

The gateway keeps one named, detached actor per application (``horizon-state.v2:<app>``,
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

An in-place upgrade (``serve deploy`` of new code under the same application name) used to leave
the actors of the older code behind: their protocol is in their name, so the new replicas make
an actor of their own and never call the old ones, and those watch only for the application's
deletion. So the watch also retires them: after a check that finds the application ``RUNNING``
(the rollout over: no replica of the old code is serving) while replicas of this code report
to this actor, it kills every actor of this application under an earlier name
(:data:`SHARED_STATE_PREFIXES`, any protocol but this one). A replica of the old code that was
still draining and made its actor again is caught at the next check. After a rollback to older
code nobody reports here, so this actor retires nothing. The older code's actor is the one its
replicas report to, and since protocol 2 it retires every other protocol's, a newer one
included: so a rollback to code of protocol 2 or later leaves no idle actor either. Only a
rollback to code from before protocol 2 leaves this one idle until the application is deleted.

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
import re
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Optional

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 15.0
ABSENT_CHECKS = 2

NAMESPACE = "horizon"
STATE_ACTOR_PREFIX = "horizon-state"
# In the actor's name: it outlives the replicas of an application whose code is upgraded in
# place, and a replica must not call an actor of another protocol. Bump it whenever a method
# of serve_app.app_state.ApplicationState changes what it takes or answers, or the actor
# gains work of its own that an actor of the earlier code, kept by the upgrade, would not do
# (2: it retires the actors of earlier names).
STATE_PROTOCOL = 2


# Every name an application's shared state has been kept under: this actor's, and the breaker
# registry's and the demand board's while each had an actor of its own (unversioned at first,
# then ``.v2``). Each followed by ``:<application>``.
SHARED_STATE_PREFIXES: tuple[str, ...] = (STATE_ACTOR_PREFIX, "horizon-breakers", "horizon-demand")
# The application status after which no replica of an older code version serves any more.
RUNNING = "RUNNING"


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


def serve_application_status(app_name: str) -> Optional[str]:
    """``app_name``'s status in Serve (``DEPLOYING``, ``RUNNING``, ``UNHEALTHY``, ``DELETING``...),
    ``""`` when Serve does not list it, None when Serve could not be asked."""
    try:
        from ray import serve

        app = serve.status().applications.get(app_name)
    except Exception as exc:  # noqa: BLE001 — no evidence either way
        log.debug("status of Serve application %s unknown: %s", app_name, exc)
        return None
    if app is None:
        return ""
    status = getattr(app, "status", "")
    return str(getattr(status, "value", status))


def superseded_actor_names(named: Iterable[Mapping[str, Any]], app_name: str) -> list[str]:
    """Of the cluster's named actors (``ray.util.list_named_actors(all_namespaces=True)``'s
    entries), those that held ``app_name``'s shared state under an earlier name."""
    prefixes = "|".join(re.escape(prefix) for prefix in SHARED_STATE_PREFIXES)
    earlier = re.compile(rf"(?:{prefixes})(?:\.v\d+)?:{re.escape(app_name)}")
    current = state_actor_name(app_name)
    return sorted(entry["name"] for entry in named
                  if entry.get("namespace") == NAMESPACE and entry.get("name") != current
                  and earlier.fullmatch(str(entry.get("name", ""))))


def _named_actors() -> list[dict[str, str]]:
    import ray

    return ray.util.list_named_actors(all_namespaces=True)


def _kill_for_good(name: str) -> None:
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
    except ValueError:  # it ended between the listing and now
        pass


def retire_superseded_actors(app_name: str, *,
                             named: Callable[[], Iterable[Mapping[str, Any]]] = _named_actors,
                             kill: Callable[[str], None] = _kill_for_good) -> list[str]:
    """End, without a restart, every actor that held ``app_name``'s shared state under an
    earlier name; returns their names. Call only once no replica of older code serves."""
    retired = superseded_actor_names(named(), app_name)
    for name in retired:
        log.info("retiring %s: application %s now keeps its shared state in %s",
                 name, app_name, state_actor_name(app_name))
        kill(name)
    return retired


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
                         status: Callable[[str], Optional[str]] = serve_application_status,
                         end: Callable[[], None] = _end_this_actor,
                         while_running: Optional[Callable[[], None]] = None,
                         only_inside_an_actor: bool = True) -> Optional[threading.Thread]:
    """Start the watch of ``app_name`` in a daemon thread of the calling actor; returns the
    thread, or None when there is nothing to watch (no application name: an actor used outside
    Serve; or, with ``only_inside_an_actor``, the class built in-process, as unit tests do).
    ``while_running`` is called after each check that finds the application ``RUNNING``; what
    it raises is logged and the watch goes on."""
    if not app_name or (only_inside_an_actor and not _inside_an_actor()):
        return None
    watch = ApplicationWatch(absent_checks)

    def run() -> None:
        while True:
            time.sleep(interval_s)
            seen = status(app_name)
            if watch.observe(None if seen is None else bool(seen)):
                log.info("Serve application %s is gone: ending its actor", app_name)
                end()
                return
            if seen == RUNNING and while_running is not None:
                try:
                    while_running()
                except Exception:  # noqa: BLE001 — the watch must outlive a failed side task
                    log.warning("the watch of %s: a step while running failed", app_name, exc_info=True)

    thread = threading.Thread(target=run, name=f"watch-{app_name}", daemon=True)
    thread.start()
    return thread
