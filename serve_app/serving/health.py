"""``/health``: starting → ready / degraded, per model.

Per model: the deployment's state and running replicas (Serve's reason when it is not up), and
the ingress's view of it (breaker, queue, latency, success rate). ``shared_state``: where
sessions and rate limits live and, for Redis, whether it answers now (one PING each), since when
it does not, and what the gateway does meanwhile. ``starting`` until routing works and every
deployment has been up once; then ``ready``, or ``degraded`` while a deployment is down, a
breaker is not closed, a shared store is unreachable, or new live routing settings failed to
apply (``routing_update`` says why; ``pending`` while they start).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from ..auth.keys import ApiKeyAuthenticator
from ..config.schema import HorizonConfig
from ..fleet.availability import DeploymentBoard
from ..fleet.names import deployment_name
from ..resilience.fallback import ResilientFleet
from ..sessions.store import SessionStore


async def shared_state_report(sessions: Optional[SessionStore],
                              auth: Optional[ApiKeyAuthenticator]) -> dict[str, Any]:
    """``{"sessions": {...}, "rate_limits": {...}}`` (rate limits only when a key has one)."""
    async def disabled() -> dict[str, Any]:
        return {"backend": "disabled"}

    async def none() -> None:
        return None

    session_health, limit_health = await asyncio.gather(
        sessions.health() if sessions is not None else disabled(),
        auth.store_health() if auth is not None else none())
    out: dict[str, Any] = {"sessions": session_health}
    if limit_health is not None:
        out["rate_limits"] = limit_health
    return out


async def health_report(cfg: HorizonConfig, board: DeploymentBoard, fleet: ResilientFleet,
                        routing_ready: bool, routing_error: str | None, *,
                        sessions: Optional[SessionStore] = None,
                        auth: Optional[ApiKeyAuthenticator] = None,
                        update: Optional[dict[str, str]] = None) -> dict[str, Any]:
    if not board.states:
        await board.refresh()
    shared = await shared_state_report(sessions, auth)
    states = board.states
    guarded = fleet.health()
    models = {}
    for m in cfg.models:
        owner = m.shares_engine_with or m.alias
        st = states.get(deployment_name(owner))
        st_dict = st.as_dict() if st is not None else {"status": "UNKNOWN", "replicas": 0}
        models[m.alias] = {"role": m.role, "backend": m.backend, "deployment": owner, **st_dict,
                           **guarded.get(m.alias, {})}
    for u in cfg.unavailable_models:
        models[u.alias] = {"role": u.role, "status": "NOT_SERVED", "reason": u.reason}
    served = [v for v in models.values() if v.get("status") != "NOT_SERVED"]
    healthy = all(v["status"] == "HEALTHY" and v.get("breaker_state", "closed") == "closed"
                  for v in served) and all(s.get("reachable", True) for s in shared.values())
    not_started = sorted({v["deployment"] for v in served
                          if not board.started(deployment_name(v["deployment"]))})
    if not routing_ready or not_started:
        state = "starting"
    else:
        # Live settings that failed to apply: the replica serves, but not as configured.
        failed_update = update is not None and update["status"] == "failed"
        state = "ready" if healthy and not failed_update else "degraded"
    body: dict[str, Any] = {"status": state, "profile": cfg.profile, "models": models,
                            "shared_state": shared}
    if not_started:
        body["waiting_for"] = [deployment_name(d) for d in not_started]
    if routing_error:
        body["error"] = routing_error
    if update is not None:
        body["routing_update"] = update
    return body
