"""Which node types of a profile's cluster a model's replicas can be scheduled on.

Mirrors Ray's own rules for the constraints a profile can express: every requested node label
must be on the node, every requested custom resource must be offered by it, and an
``accelerator_type`` must equal the node's card. GPU count and memory are the planner's job.
"""

from __future__ import annotations

from serve_app.config.cluster import ClusterSettings, NodeType
from serve_app.config.models import ModelSettings


def node_matches(model: ModelSettings, node: NodeType) -> bool:
    p = model.placement
    if any(node.labels.get(k) != v for k, v in p.node_labels.items()):
        return False
    if any(node.resources.get(k, 0) <= 0 for k in p.resources):
        return False
    if p.accelerator_type is not None and p.accelerator_type != node.accelerator_type:
        return False
    if p.num_gpus > 0 and node.gpus == 0:
        return False
    return True


def candidate_node_types(model: ModelSettings, cluster: ClusterSettings) -> list[NodeType]:
    return [n for n in cluster.node_types if node_matches(model, n)]


def describe_constraints(model: ModelSettings) -> str:
    p = model.placement
    parts = [f"labels {p.node_labels}" if p.node_labels else "",
             f"resources {sorted(p.resources)}" if p.resources else "",
             f"accelerator_type {p.accelerator_type}" if p.accelerator_type else "",
             f"{p.num_gpus:g} GPU per worker" if p.num_gpus else ""]
    return ", ".join(x for x in parts if x) or "no constraints"
