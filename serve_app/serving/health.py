"""``/health``: starting → ready / degraded, per model.

Per model: the deployment's state and running replicas (Serve's reason when it is not up), and
the ingress's view of it (breaker, queue, latency, success rate). ``starting`` until routing
works and every deployment has been up once; then ``ready``, or ``degraded`` while a deployment
is down or a breaker is not closed.
"""

from __future__ import annotations

from typing import Any

from ..config.schema import HorizonConfig
from ..fleet.availability import DeploymentBoard
from ..fleet.names import deployment_name
from ..resilience.fallback import ResilientFleet


async def health_report(cfg: HorizonConfig, board: DeploymentBoard, fleet: ResilientFleet,
                        routing_ready: bool, routing_error: str | None) -> dict[str, Any]:
    if not board.states:
        await board.refresh()
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
                  for v in served)
    not_started = sorted({v["deployment"] for v in served
                          if not board.started(deployment_name(v["deployment"]))})
    if not routing_ready or not_started:
        state = "starting"
    else:
        state = "ready" if healthy else "degraded"
    body: dict[str, Any] = {"status": state, "profile": cfg.profile, "models": models}
    if not_started:
        body["waiting_for"] = [deployment_name(d) for d in not_started]
    if routing_error:
        body["error"] = routing_error
    return body
