"""Ray placement options of a model deployment, derived from its ``placement`` settings.

A replica is a set of engine workers: ``tensor_parallel_size x pipeline_parallel_size`` for an
LLM (vLLM, or the simulated stand-in of one), one for an embedding model. Each worker gets one
placement-group bundle of the profile's per-worker shape, so k2 reserves 8 x {GPU: 1} with
STRICT_PACK on node A whether it runs vLLM or the simulated engine: placement is provable on a
cluster of logical GPUs. Replica counts and autoscaling are the app builder's, not set here.
"""

from __future__ import annotations

from typing import Any

from serve_app.capacity.errors import PlacementError
from serve_app.capacity.nodes import candidate_node_types, describe_constraints
from serve_app.config.models import ModelSettings
from serve_app.config.schema import HorizonConfig

# The custom resource Ray gives a node per accelerator model; requesting a sliver of it pins a
# bundle to that card without consuming anything (ray.serve.llm does the same).
_ACCELERATOR_HINT = 0.001


def worker_count(model: ModelSettings) -> int:
    if model.backend == "embedding":
        return 1
    return model.engine.tensor_parallel_size * model.engine.pipeline_parallel_size


def worker_bundle(model: ModelSettings) -> dict[str, float]:
    """Resources one engine worker reserves (the shape of every bundle of the replica)."""
    p = model.placement
    bundle: dict[str, float] = {"CPU": p.num_cpus}
    if p.num_gpus > 0:
        bundle["GPU"] = p.num_gpus
    bundle.update(p.resources)
    return bundle


def replica_gpus(model: ModelSettings) -> float:
    """GPUs one replica holds (0 for a CPU-only deployment)."""
    return model.placement.num_gpus * worker_count(model) if model.placement.num_gpus > 0 else 0.0


def uses_placement_group(model: ModelSettings) -> bool:
    """A multi-worker GPU replica needs a placement group so its workers land together."""
    return model.placement.num_gpus > 0 and worker_count(model) > 1


def deployment_options(model: ModelSettings, cfg: HorizonConfig) -> dict[str, Any]:
    """Ray Serve deployment options carrying placement, for a non-vLLM deployment.

    Raises :class:`PlacementError` when the profile has a cluster and no node type of it
    satisfies the model's constraints.
    """
    if cfg.cluster is not None and model.placement.num_gpus > 0:
        if not candidate_node_types(model, cfg.cluster):
            raise PlacementError(model.alias, f"no node type of cluster {cfg.cluster.name!r} "
                                              f"offers {describe_constraints(model)}")
    p = model.placement
    actor: dict[str, Any] = {"num_cpus": p.num_cpus}
    memory = int(p.memory_gb * 1e9) if p.memory_gb else None
    if memory:
        actor["memory"] = memory
    options: dict[str, Any] = {"ray_actor_options": actor}

    if uses_placement_group(model):
        bundle = worker_bundle(model)
        if p.accelerator_type:
            bundle[f"accelerator_type:{p.accelerator_type}"] = _ACCELERATOR_HINT
        bundles = [dict(bundle) for _ in range(worker_count(model))]
        if memory:
            bundles[0]["memory"] = memory
        # The replica actor runs in bundle 0 and must fit in it; it owns that bundle's GPU.
        actor["num_gpus"] = bundle["GPU"]
        if p.resources:
            actor["resources"] = dict(p.resources)
        options["placement_group_bundles"] = bundles
        options["placement_group_strategy"] = p.placement_group_strategy
        if p.node_labels:
            options["placement_group_bundle_label_selector"] = [dict(p.node_labels) for _ in bundles]
        return options

    if p.num_gpus > 0:
        actor["num_gpus"] = p.num_gpus
    if p.accelerator_type:
        actor["accelerator_type"] = p.accelerator_type
    if p.resources:
        actor["resources"] = dict(p.resources)
    if p.node_labels:
        actor["label_selector"] = dict(p.node_labels)
    return options


def llm_placement(model: ModelSettings) -> dict[str, Any]:
    """The ``ray.serve.llm`` ``LLMConfig`` keyword arguments that carry placement.

    ``placement_group_config`` lists one bundle per engine worker (TP x PP); a fractional GPU
    bundle makes ray.serve.llm set ``VLLM_RAY_PER_WORKER_GPUS`` so vLLM shares the card.
    ``accelerator_type`` makes ray.serve.llm add its accelerator hint to every bundle; it must be
    a type Ray knows (the planner checks). Node labels cannot be expressed in an LLM placement
    group: pin LLMs with custom ``resources``. Engine parallelism (``tensor_parallel_size``,
    ``pipeline_parallel_size``, ``gpu_memory_utilization``) stays in the engine kwargs built
    from the same profile, so it always equals the bundle count here.
    """
    if model.backend != "vllm":
        raise ValueError(f"{model.alias}: llm_placement is for backend vllm, not {model.backend}")
    if model.placement.num_gpus <= 0:
        raise PlacementError(model.alias, "a GPU vLLM deployment needs placement.num_gpus > 0")
    kwargs: dict[str, Any] = {
        "placement_group_config": {
            "bundles": [worker_bundle(model) for _ in range(worker_count(model))],
            "strategy": model.placement.placement_group_strategy,
        },
    }
    if model.placement.accelerator_type:
        kwargs["accelerator_type"] = model.placement.accelerator_type
    return kwargs


def cpu_llm_placement(model: ModelSettings) -> dict[str, Any]:
    """``LLMConfig`` placement of a CPU vLLM engine: exactly ``placement.num_cpus`` per worker.

    On CPU, ``ray.serve.llm`` runs vLLM with its multiprocessing executor: the engine core and
    its worker are child processes of the replica actor, not Ray actors. Its defaults would
    reserve a ``{CPU: 1}`` bundle for the engine *plus* one CPU for the replica actor, two
    logical CPUs for one engine, which leaves nothing else schedulable on a 2-core machine. The
    replica actor therefore asks for no CPU of its own and runs inside the engine's bundle,
    whose size is the profile's ``num_cpus`` (and ``memory_gb``, when set).
    """
    bundle = worker_bundle(model)
    if model.placement.memory_gb:
        bundle["memory"] = int(model.placement.memory_gb * 1e9)
    return {
        "placement_group_config": {"bundles": [dict(bundle) for _ in range(worker_count(model))],
                                   "strategy": model.placement.placement_group_strategy},
        "deployment_config": {"ray_actor_options": {"num_cpus": 0}},
    }
