"""Start-up progress of a Serve application, as lines a person reads on the console.

``horizon serve`` and ``horizon status`` take a :class:`DeploymentView` per deployment from
``serve.status()``; :func:`changes` turns two successive snapshots into the lines worth
printing (a deployment appearing, changing state or replica count, or Serve giving a new reason,
such as a replica that cannot be scheduled with the resources it needs). Pure functions over
plain data: tested without Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

RUNNING = "RUNNING"


@dataclass(frozen=True)
class DeploymentView:
    name: str
    status: str
    running: int
    starting: int
    message: str = ""

    @property
    def reason(self) -> str:
        """Serve's message on one line (it wraps some of them)."""
        return " ".join(self.message.split())


def _state_name(state: Any) -> str:
    value = getattr(state, "value", state)
    return str(value).rsplit(".", 1)[-1]


def snapshot(serve_status: Any, app_name: str) -> dict[str, DeploymentView]:
    """Deployment name → view, for one application of a ``serve.status()`` answer."""
    app = (getattr(serve_status, "applications", None) or {}).get(app_name)
    if app is None:
        return {}
    views = {}
    for name, dep in (app.deployments or {}).items():
        states = {_state_name(s): n for s, n in (dep.replica_states or {}).items()}
        running = states.get(RUNNING, 0)
        views[name] = DeploymentView(name=name, status=_state_name(dep.status), running=running,
                                     starting=sum(states.values()) - running,
                                     message=dep.message or "")
    return views


def app_status(serve_status: Any, app_name: str) -> tuple[str, str]:
    app = (getattr(serve_status, "applications", None) or {}).get(app_name)
    if app is None:
        return "NOT_STARTED", ""
    return _state_name(app.status), " ".join((app.message or "").split())


def describe(view: DeploymentView) -> str:
    replicas = f"{view.running} running" + (f", {view.starting} starting" if view.starting else "")
    line = f"{view.name:<18} {view.status:<10} {replicas}"
    return f"{line} — {view.reason}" if view.reason else line


def changes(before: Mapping[str, DeploymentView], after: Mapping[str, DeploymentView]) -> list[str]:
    """Lines for every deployment that is new or differs from ``before``."""
    return [describe(view) for name, view in sorted(after.items()) if before.get(name) != view]


def elapsed_prefix(seconds: float) -> str:
    return f"[{seconds:6.1f}s]"


def health_summary(body: Mapping[str, Any]) -> str:
    """One short line from the gateway's ``/health`` body: its state, what it waits for (the
    deployments' own lines carry Serve's reasons) and any shared-state store it cannot reach
    (a profile's Redis that is not running: the gateway serves, degraded)."""
    parts = [f"gateway {body.get('status', 'unknown')}"]
    if body.get("error"):
        parts.append(str(body["error"]))
    if body.get("waiting_for"):
        parts.append("waiting for " + ", ".join(body["waiting_for"]))
    down = sorted({str(info.get("deployment", alias)) for alias, info in (body.get("models") or {}).items()
                   if info.get("status") not in ("HEALTHY", "NOT_SERVED", None)})
    if down and not body.get("waiting_for"):
        parts.append("not healthy: " + ", ".join(down))
    for name, store in sorted((body.get("shared_state") or {}).items()):
        if isinstance(store, Mapping) and store.get("reachable") is False:
            where = f" at {store['url']}" if store.get("url") else ""
            meanwhile = f"; {store['meanwhile']}" if store.get("meanwhile") else ""
            parts.append(f"{name} store{where} unreachable{meanwhile}")
    roll_call = body.get("ingress")
    if isinstance(roll_call, Mapping) and len(roll_call.get("routing_settings") or {}) > 1:
        parts.append("ingress replicas route with different settings: " + _digests(roll_call))
    return " — ".join(parts)


def _digests(roll_call: Mapping[str, Any]) -> str:
    return ", ".join(f"{digest} on {n}" for digest, n in (roll_call.get("routing_settings") or {}).items())


def ingress_summary(body: Mapping[str, Any]) -> str | None:
    """One line on every ingress replica's routing from ``/health``'s ``ingress`` roll call
    (None when the body has none): whether all of them route with one set of settings, which
    is how an operator sees that a change of the live settings reached every replica."""
    roll_call = body.get("ingress")
    if not isinstance(roll_call, Mapping):
        return None
    replicas = int(roll_call.get("replicas") or 0)
    settings = roll_call.get("routing_settings") or {}
    if len(settings) == 1 and next(iter(settings.values())) == replicas:
        routing = f"all route with settings {next(iter(settings))}"
    else:
        routing = f"routing settings {_digests(roll_call) or 'not reported'}"
    states = ", ".join(f"{n} {state}" for state, n in (roll_call.get("routing") or {}).items()
                       if state != "ready")
    noun = "replica" if replicas == 1 else "replicas"
    return f"ingress: {replicas} {noun} reporting, {routing}" + (f" ({states})" if states else "")
