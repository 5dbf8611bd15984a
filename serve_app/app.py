"""Application builder: a profile's args → the Ray Serve deployment graph.

``serve run configs/X.yaml`` calls :func:`build_app` with ``applications[0].args``. Each model
that owns an engine becomes its own deployment (``model-<alias>``), with its own placement,
replicas and admission bounds; aliases that share an engine resolve to the owner's handle. The
ingress receives every handle and is the only HTTP-facing deployment.
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from serve_app.api.ingress import HorizonIngress
from serve_app.autoscaling.options import scaling_options
from serve_app.capacity.planner import check_placement
from serve_app.config.loader import parse_config
from serve_app.config.models import ModelSettings
from serve_app.config.schema import HorizonConfig
from serve_app.fleet.backends import backend
from serve_app.fleet.names import deployment_name

__all__ = ["build_app", "build_graph", "build_model_node", "deployment_name"]


def build_model_node(model: ModelSettings, cfg: HorizonConfig) -> Application:
    """The deployment of one model that owns its engine, built by its backend."""
    return backend(model.backend).build(model, cfg, deployment_name(model.alias), scaling_options(model))


def build_graph(cfg: HorizonConfig, raw_args: dict[str, Any]) -> Application:
    handles = {m.alias: build_model_node(m, cfg) for m in cfg.models if m.shares_engine_with is None}
    server = cfg.global_.server
    ingress_options: dict[str, Any] = {"max_ongoing_requests": server.max_ongoing_requests,
                                       "ray_actor_options": {"num_cpus": 0}}
    if server.max_replicas > server.min_replicas:
        ingress_options["autoscaling_config"] = {"min_replicas": server.min_replicas,
                                                 "max_replicas": server.max_replicas,
                                                 "target_ongoing_requests": max(1, server.max_ongoing_requests // 2)}
    else:
        ingress_options["num_replicas"] = server.min_replicas
    return HorizonIngress.options(**ingress_options).bind(raw_args, handles)


def build_app(args: dict[str, Any]) -> Application:
    """Ray Serve application builder (``import_path: serve_app.app:build_app``)."""
    raw = dict(args)
    cfg = parse_config(raw, source="serve application args")
    # An impossible placement (say k2 TP8 on a 4-GPU node) fails here, before anything deploys.
    check_placement(cfg)
    return build_graph(cfg, raw)
