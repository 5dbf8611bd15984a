"""The launcher YAML and Prometheus config agree with the fleet profile's node types."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml
from cluster_helpers import ROOT, fleet

LAUNCHER = ROOT / "cluster" / "launcher" / "fleet.yaml"
PROMETHEUS = ROOT / "cluster" / "monitoring" / "prometheus.yml"


def _worker_branches() -> dict[str, str]:
    """IP -> the `ray start` command the launcher runs on that worker."""
    doc = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    script = doc["worker_start_ray_commands"][-1]
    return dict(re.findall(r"(\d+\.\d+\.\d+\.\d+)\) (ray start [^;]+);;", script))


def test_launcher_starts_one_worker_per_node_type_with_its_labels_and_resources():
    doc = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    branches = _worker_branches()
    assert sorted(branches) == sorted(doc["provider"]["worker_ips"])
    cluster = fleet().cluster
    assert doc["min_workers"] == doc["max_workers"] == sum(n.count for n in cluster.node_types)
    for node in cluster.node_types:
        labels = ",".join(f"{k}={v}" for k, v in sorted(node.labels.items()))
        command = next(c for c in branches.values() if f"--labels={labels} " in c)
        assert f"--num-gpus={node.gpus} " in command
        assert f"--num-cpus={node.cpus} " in command
        resources = json.loads(re.search(r"--resources='([^']+)'", command).group(1))
        assert resources == node.resources


def test_the_launcher_file_passes_rays_own_checks_as_ray_up_runs_them():
    # `ray up` fills in the local provider's node type from min/max_workers (prepare_config),
    # then checks the result against Ray's cluster schema (validate_config): a key Ray's schema
    # does not know fails there, before any machine is touched.
    from ray.autoscaler._private.util import prepare_config, validate_config
    doc = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    prepared = prepare_config(doc)
    validate_config(prepared)
    assert prepared["available_node_types"][prepared["head_node_type"]]["max_workers"] == len(_worker_branches())
    broken = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    broken["idle_timeout_minute"] = 60
    with pytest.raises(jsonschema.ValidationError, match="idle_timeout_minute"):
        validate_config(prepare_config(broken))


def _exported_env(command: str) -> dict[str, str]:
    exports = re.search(r"export ([^;]+);", command)
    return dict(pair.split("=", 1) for pair in exports.group(1).split()) if exports else {}


def test_every_launcher_node_starts_ray_with_the_serve_environment_horizon_serve_uses():
    # Each process reads Serve's settings where it runs: the gRPC cap set on the head alone
    # left the model replicas on the workers refusing a 5 MB image (4 MiB default).
    from serve_app.tools.local_cluster import CLUSTER_SERVE_ENV, FAST_MODE_ENV, GRPC_MESSAGE_LIMIT_ENV
    doc = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    head = _exported_env(doc["head_start_ray_commands"][-1])
    worker = _exported_env(doc["worker_start_ray_commands"][-1])
    assert head == worker == CLUSTER_SERVE_ENV
    assert CLUSTER_SERVE_ENV == {k: v for k, v in FAST_MODE_ENV.items() if k != "RAY_SERVE_ENABLE_HA_PROXY"}
    assert int(head[GRPC_MESSAGE_LIMIT_ENV]) == 64 * 1024 * 1024


def test_launcher_head_runs_no_gpu_work():
    doc = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    head = " ".join(doc["head_start_ray_commands"])
    assert "--num-gpus=0" in head and "--metrics-export-port=8080" in head


def test_prometheus_scrapes_ray_metrics_from_launcher_and_kuberay_clusters():
    doc = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert {"ray", "ray-kuberay"} <= set(jobs)
    assert jobs["ray"]["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]
    assert jobs["ray-kuberay"]["kubernetes_sd_configs"][0]["namespaces"]["names"] == [fleet().cluster.namespace]


def test_prometheus_scrapes_the_gpu_exporter_of_every_launcher_worker():
    launcher = yaml.safe_load(LAUNCHER.read_text(encoding="utf-8"))
    jobs = {j["job_name"]: j for j in yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))["scrape_configs"]}
    targets = [t for group in jobs["dcgm"]["static_configs"] for t in group["targets"]]
    assert targets == [f"{ip}:9400" for ip in launcher["provider"]["worker_ips"]]
