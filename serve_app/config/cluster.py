"""The Ray cluster a GPU profile is placed on (node types, head, planning assumptions)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from .base import RayLabels, ResourceAmount, Strict

class NodeType(Strict):
    """One kind of Ray worker node of the production cluster (SPEC §2 hardware plan)."""

    name: str = Field(..., pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    description: str = ""
    count: int = Field(1, ge=1)
    gpus: int = Field(0, ge=0)
    # Usable memory per GPU in GB (1e9 bytes), the figure the capacity planner divides.
    gpu_memory_gb: float = Field(0.0, ge=0)
    # What Ray reports for the card (e.g. A100; a GeForce RTX 4090 reports GeForce-RTX-4090).
    accelerator_type: Optional[str] = None
    # Ray node labels (``ray start --labels``) and custom resources the node offers.
    labels: RayLabels = Field(default_factory=dict)
    resources: dict[str, ResourceAmount] = Field(default_factory=dict)
    cpus: int = Field(..., ge=1)
    memory_gb: float = Field(..., gt=0)
    # Kubernetes scheduling of this node type's pods (KubeRay worker group).
    k8s_node_selector: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _gpu_memory_given(self) -> "NodeType":
        if self.gpus > 0 and self.gpu_memory_gb <= 0:
            raise ValueError("gpu_memory_gb is required when gpus > 0")
        return self


class HeadNodeSettings(Strict):
    """The Ray head: GCS, Serve controller and HTTP proxy; no GPU work is scheduled on it."""

    cpus: int = Field(8, ge=1)
    memory_gb: float = Field(32.0, gt=0)


class PlanningSettings(Strict):
    """Capacity-planner assumptions an operator may tune (``horizon plan``)."""

    # Memory per GPU held back from the KV cache for activations / CUDA graphs / NCCL buffers.
    activation_reserve_gb_per_gpu: float = Field(1.0, ge=0)
    # Model facts file (relative paths resolve from the project root).
    facts_file: str = "cluster/model_facts.yaml"


class ClusterSettings(Strict):
    """The Ray cluster a GPU profile runs on; feeds placement checks and cluster manifests."""

    # The RayService's name: KubeRay refuses one that is not a DNS-1035 label (a letter first)
    # or is longer than 47 characters (its RayCluster and Services add suffixes).
    name: str = Field("k2-horizon", pattern=r"^[a-z]([a-z0-9-]{0,45}[a-z0-9])?$")
    ray_version: str = Field("2.60.0", pattern=r"^\d+\.\d+\.\d+$")
    # Container image with this project, Ray and vLLM installed (KubeRay pods).
    image: str = Field("k2-horizon:latest", min_length=1)
    # A Kubernetes namespace name (a DNS-1123 label), as the RayService manifest needs it.
    namespace: str = Field("default", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    head: HeadNodeSettings = Field(default_factory=HeadNodeSettings)
    node_types: list[NodeType] = Field(..., min_length=1)
    planning: PlanningSettings = Field(default_factory=PlanningSettings)

    @model_validator(mode="after")
    def _unique_names(self) -> "ClusterSettings":
        names = [n.name for n in self.node_types]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate node type names: {dupes}")
        return self

    def node_type(self, name: str) -> NodeType:
        for n in self.node_types:
            if n.name == name:
                return n
        raise KeyError(name)
