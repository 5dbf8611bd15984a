"""What every kind of model deployment answers: how it is built, reached, placed and planned.

A backend is one module under this package holding everything the rest of the code needs to
know about one kind of deployment: the Serve application node it builds, the client the
gateway talks to it through, the resources one replica asks Ray for, and the facts the
capacity planner and the autoscaler use. Nothing outside ``serve_app/fleet/backends/`` branches
on ``model.backend``: it asks :func:`serve_app.fleet.backends.backend` for the module's object.

The defaults here describe a deployment that is one Ray actor per replica (the embedding and
simulated backends); the vLLM backend overrides what a placement group of engine workers changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ...config.models import ModelSettings
from ...config.schema import HorizonConfig

if TYPE_CHECKING:
    from ..availability import DeploymentBoard

# The custom resource Ray gives a node per accelerator model; requesting a sliver of it pins a
# bundle to that card without consuming anything (ray.serve.llm does the same).
ACCELERATOR_HINT = 0.001


class Backend:
    """One kind of model deployment (subclassed once per module of this package)."""

    kind: str = ""
    # The engine enforces ``response_format`` JSON schemas itself (guided decoding); otherwise
    # the gateway extracts, repairs and retries (serve_app.outputs).
    constrains_decoding: bool = False
    # The deployment holds model weights in (GPU) memory the capacity planner must fit.
    holds_weights: bool = False
    # A decoder's KV cache is planned for it (the simulated engine stands in for vLLM's).
    has_kv_cache: bool = False
    # The engine shards attention heads across tensor-parallel workers (they must divide).
    shards_heads: bool = False
    # Resident memory of one replica when the profile gives no ``placement.memory_gb`` (measured
    # on the CPU profiles, docs/benchmarks.md "Memory").
    default_memory_gb: float = 1.0

    # ------------------------------------------------------------------ serving
    def build(self, model: ModelSettings, cfg: HorizonConfig, name: str,
              scaling: dict[str, Any]) -> Any:
        """The Serve application node of ``model``'s own deployment named ``name``, with the
        replica and autoscaling options ``scaling`` (serve_app.autoscaling.options), plus Serve's
        ``logging_config`` when the profile changes it (serve_app.observability.logging)."""
        raise NotImplementedError

    def client(self, alias: str, owner: ModelSettings, handle: Any, deployment: str,
               board: Optional["DeploymentBoard"]) -> Any:
        """The gateway's client of one alias served by ``owner``'s deployment."""
        raise NotImplementedError

    def prepare(self, model: ModelSettings) -> None:
        """Build local assets the deployment needs before it can start (none by default)."""

    # ------------------------------------------------------------------ placement facts
    def workers(self, model: ModelSettings) -> int:
        """Engine workers of one replica (each gets one placement-group bundle)."""
        return 1

    def replica_cpus(self, model: ModelSettings) -> float:
        """Logical CPUs one replica reserves, as Ray is asked for them."""
        return model.placement.num_cpus

    def replica_gpus(self, model: ModelSettings) -> float:
        p = model.placement
        return p.num_gpus * self.workers(model) if p.num_gpus > 0 else 0.0

    def replica_memory_gb(self, model: ModelSettings, node_memory_gb: float) -> float:
        """Memory one replica takes on a node with ``node_memory_gb`` in all (GB)."""
        return model.placement.memory_gb or self.default_memory_gb

    def memory_note(self, model: ModelSettings) -> str:
        """Why a replica takes the memory it does, when that is not plain (said when it does not fit)."""
        return ""

    def kv_cache_bytes(self, model: ModelSettings) -> Optional[float]:
        """KV cache bytes per device the configuration fixes (None: the engine sizes its own,
        or it keeps none)."""
        return None

    def engine_slots(self, model: ModelSettings) -> Optional[int]:
        """Sequences one replica decodes at once (None: whatever it is handed)."""
        return model.engine.max_num_seqs

    def deployment_options(self, model: ModelSettings) -> dict[str, Any]:
        """Serve options carrying placement for a one-actor replica."""
        return actor_options(model)

    # ------------------------------------------------------------------ capacity facts
    def gpu_memory_share(self, model: ModelSettings) -> Optional[float]:
        """Share of a shared GPU's memory the deployment claims by configuration (None: the
        planner derives it from the model's weights)."""
        return None

    def placement_problems(self, model: ModelSettings, on_cluster: bool) -> list[str]:
        """Why ``model``'s placement cannot work as configured (empty: nothing known); some
        only matter on a GPU cluster (``on_cluster``)."""
        return []

    # ------------------------------------------------------------------ engine settings
    def engine_problems(self, model: ModelSettings) -> list[tuple[str, str]]:
        """(key below ``models[i]``, problem) for each engine setting the deployment would
        refuse when it starts, found without starting it (empty: nothing known)."""
        return []


def worker_bundle(model: ModelSettings) -> dict[str, float]:
    """Resources one engine worker reserves (the shape of every bundle of the replica)."""
    p = model.placement
    bundle: dict[str, float] = {"CPU": p.num_cpus}
    if p.num_gpus > 0:
        bundle["GPU"] = p.num_gpus
    bundle.update(p.resources)
    return bundle


def actor_options(model: ModelSettings, workers: int = 1) -> dict[str, Any]:
    """Ray Serve deployment options carrying placement (``ray_actor_options`` and, for a
    multi-worker GPU replica, a placement group whose first bundle holds the replica actor)."""
    p = model.placement
    actor: dict[str, Any] = {"num_cpus": p.num_cpus}
    memory = int(p.memory_gb * 1e9) if p.memory_gb else None
    if memory:
        actor["memory"] = memory
    options: dict[str, Any] = {"ray_actor_options": actor}
    if p.num_gpus > 0 and workers > 1:
        bundle = worker_bundle(model)
        if p.accelerator_type:
            bundle[f"accelerator_type:{p.accelerator_type}"] = ACCELERATOR_HINT
        bundles = [dict(bundle) for _ in range(workers)]
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
