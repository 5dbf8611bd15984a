"""``horizon status``: what a running profile is doing, from Serve's controller and the gateway.

Connects to the Ray cluster ``horizon serve`` started (or ``--address``) as a Ray client does,
with the cluster's token when token authentication is on, and prints each deployment's state,
running and starting replicas and Serve's reason; the cluster's logical resources in use; the
gateway's ``/health`` state and the routing settings of every ingress replica; and where
metrics are. Exit 0 when the application is running,
1 when nothing is, 2 when it is there but not healthy.
"""

from __future__ import annotations

import argparse
import sys

import ray
from ray import serve

from . import local_cluster as lc
from .serve import get_health, say
from .progress import app_status, describe, health_summary, ingress_summary, snapshot


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None, help="Ray cluster address (default: horizon serve's)")
    parser.add_argument("--app", default=None, help="application name (default: horizon serve's)")
    parser.set_defaults(func=run)


def _resources(total: dict, available: dict) -> str:
    parts = []
    for key in ("CPU", "GPU", "memory"):
        if key not in total:
            continue
        used = total[key] - available.get(key, 0)
        if key == "memory":
            parts.append(f"memory {used / 1e9:.1f}/{total[key] / 1e9:.1f} GB reserved")
        else:
            parts.append(f"{key} {used:g}/{total[key]:g}")
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    state = lc.ServeState.load()
    address = args.address or (state.gcs_address if state else None) or \
        ("auto" if lc.running_ray_address() else None)
    if not address:
        say("nothing is running: no horizon serve and no Ray cluster on this machine")
        return 1
    if address != "auto" and ":" in address and not lc.answers(address):
        # A stale record (a cluster that was stopped or crashed): ray.init would retry for minutes.
        say(f"nothing is running: the Ray cluster at {address} does not answer")
        return 1
    lc.use_cluster_token()
    try:
        ray.init(address=address, namespace="serve", log_to_driver=False, logging_level="ERROR")
    except Exception as exc:  # noqa: BLE001 — say why instead of a traceback
        print(f"horizon status: cannot connect to Ray at {address}: {exc}", file=sys.stderr)
        return 1
    try:
        status = serve.status()
        app_name = args.app or (state.app_name if state else None) or next(iter(status.applications), None)
        if app_name is None:
            say(f"Ray is running at {address} but no Serve application is deployed")
            return 1
        app_state, message = app_status(status, app_name)
        print(f"application {app_name}: {app_state}{' — ' + message if message else ''}")
        for view in snapshot(status, app_name).values():
            print(f"  {describe(view)}")
        print(f"resources: {_resources(ray.cluster_resources(), ray.available_resources())}")
        for node in ray.nodes():
            if node.get("Alive"):
                print(f"metrics: Prometheus text at http://{node.get('NodeManagerAddress')}:"
                      f"{node.get('MetricsExportPort')}/metrics (also GET /metrics on the gateway)")
        if state is not None:
            if dashboard := state.dashboard_line():
                print(dashboard)
            body = get_health(state.base_url)
            summary = health_summary(body) if body else \
                "no gateway answer on /health (its application is not deployed, or not yet)"
            print(f"{state.base_url}: {summary}")
            if body and (ingress := ingress_summary(body)):
                print(ingress)
        healthy = app_state == "RUNNING"
        return 0 if healthy else 2
    finally:
        ray.shutdown()
