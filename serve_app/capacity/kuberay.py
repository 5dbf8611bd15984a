"""The KubeRay RayService manifest generated from a GPU profile (``horizon kuberay``,
serve_app.tools.kuberay, checks the profile and writes it).

``serveConfigV2`` is the profile's own Ray Serve config (so the manifest and
``configs/fleet.yaml`` cannot drift: a test regenerates and compares), and the RayCluster has
one worker group per node type of the profile's ``cluster`` section, each started with that
node type's Ray labels and custom resources so the deployments' placement constraints match
the pods they need. The fields are those of KubeRay 1.5 and later (the group's ``labels``).
The head exposes the port the profile's Serve listens on, and every container starts with the
Serve environment the caller gives (the launcher's: the fast mode without HAProxy).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import yaml

from serve_app.config.cluster import ClusterSettings, NodeType
from serve_app.config.loader import serve_http
from serve_app.config.schema import HorizonConfig

DEFAULT_OUTPUT = "cluster/kuberay/rayservice.yaml"
# Ports of a Ray node: GCS, dashboard, client, metrics export; Serve's HTTP port is the profile's.
_HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}
_METRICS_PORT = 8080
# vLLM tensor-parallel workers exchange tensors through shared memory.
_SHM_GB_PER_GPU = 8


class _LiteralStr(str):
    """A string dumped as a YAML block literal (the readable form of serveConfigV2)."""


def _literal_representer(dumper: yaml.SafeDumper, data: _LiteralStr) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style="|")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_LiteralStr, _literal_representer)


def _start_params(cluster_node: NodeType) -> dict[str, str]:
    params = {"num-cpus": str(cluster_node.cpus), "num-gpus": str(cluster_node.gpus),
              "metrics-export-port": str(_METRICS_PORT)}
    if cluster_node.resources:
        # KubeRay passes this value to `ray start --resources` verbatim, quotes included.
        params["resources"] = json.dumps(json.dumps(cluster_node.resources, sort_keys=True))
    return params


def _container(name: str, image: str, cpus: int, memory_gb: float, gpus: int,
               ports: dict[str, int], env: Mapping[str, str]) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": str(cpus), "memory": f"{memory_gb:g}G"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    container: dict[str, Any] = {
        "name": name, "image": image,
        "resources": {"limits": limits, "requests": dict(limits)},
        "ports": [{"name": k, "containerPort": v} for k, v in ports.items()],
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    if gpus:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return container


def _worker_group(cluster: ClusterSettings, node: NodeType, env: Mapping[str, str]) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [_container("ray-worker", cluster.image, node.cpus, node.memory_gb,
                                                      node.gpus, {"metrics": _METRICS_PORT}, env)]}
    if node.k8s_node_selector:
        pod["nodeSelector"] = dict(node.k8s_node_selector)
    if node.gpus:
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                         "sizeLimit": f"{_SHM_GB_PER_GPU * node.gpus}G"}}]
    group: dict[str, Any] = {
        "groupName": node.name,
        "replicas": node.count, "minReplicas": node.count, "maxReplicas": node.count,
        "rayStartParams": _start_params(node),
    }
    if node.labels:
        # The group's own field, from which KubeRay writes `ray start --labels`: since KubeRay
        # 1.5 its validation refuses a worker group with `labels` in rayStartParams.
        group["labels"] = dict(sorted(node.labels.items()))
    group["template"] = {"metadata": {"labels": {"horizon.io/node-type": node.name}}, "spec": pod}
    return group


def rayservice_manifest(document: dict[str, Any], cfg: HorizonConfig, source: str,
                        serve_env: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The RayService object for a profile document (a Ray Serve config) and its parsed config;
    ``serve_env``: the environment every Ray container starts with (Serve's mode and limits,
    which each process reads where it runs)."""
    cluster = cfg.cluster
    serve_env = serve_env or {}
    if cluster is None:
        raise ValueError(f"{source} has no 'cluster' section: KubeRay manifests need the node types")
    serve_config = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    ports = {**_HEAD_PORTS, "serve": serve_http(document)[1], "metrics": _METRICS_PORT}
    head = {
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": str(cluster.head.cpus),
                           "num-gpus": "0", "metrics-export-port": str(_METRICS_PORT)},
        "template": {"metadata": {"labels": {"horizon.io/node-type": "head"}},
                     "spec": {"containers": [_container("ray-head", cluster.image, cluster.head.cpus,
                                                        cluster.head.memory_gb, 0, ports, serve_env)]}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": cluster.name, "namespace": cluster.namespace,
                     "labels": {"app.kubernetes.io/name": cluster.name,
                                "app.kubernetes.io/managed-by": "horizon-kuberay"}},
        "spec": {
            "serveConfigV2": _LiteralStr(serve_config),
            "rayClusterConfig": {
                "rayVersion": cluster.ray_version,
                # Fixed hardware: node groups are sized by the profile, not autoscaled.
                "enableInTreeAutoscaling": False,
                "headGroupSpec": head,
                "workerGroupSpecs": [_worker_group(cluster, n, serve_env) for n in cluster.node_types],
            },
        },
    }


def manifest_text(document: dict[str, Any], cfg: HorizonConfig, source: str,
                  serve_env: Optional[Mapping[str, str]] = None) -> str:
    """The manifest file's text: a header naming the command that wrote it, then the YAML."""
    manifest = rayservice_manifest(document, cfg, source, serve_env)
    header = (f"# GENERATED by `horizon kuberay --config {source}` — do not edit by hand.\n"
              f"# serveConfigV2 is that profile verbatim; worker groups are its cluster.node_types.\n")
    return header + yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
