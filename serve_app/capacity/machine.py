"""Does a profile without a ``cluster`` section fit the one machine ``horizon serve`` starts it on?

Ray schedules by *logical* resources: a replica that asks for more CPUs, GPUs or memory than
the node has left stays pending forever, and Serve only says so in its controller log. This
module adds up what every deployment of a profile asks Ray for at start (initial replicas) and
at most (``max_replicas``), in the same terms Ray uses, and compares that with what Ray will
detect on this machine: its logical CPUs (the cgroup-aware core count), its GPUs and its
available memory. ``horizon validate``, ``horizon plan`` and ``horizon serve`` run it, so a
profile that cannot be scheduled is refused before anything starts, naming the deployment.

Profiles with a ``cluster`` section run on that cluster and are checked by the planner instead.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import psutil

from serve_app.config.schema import HorizonConfig
from serve_app.fleet.backends import backend
from serve_app.fleet.names import deployment_name

from .errors import PlacementError

# The ingress replica and Ray's own processes (GCS, raylet, Serve controller, proxy, agents).
INGRESS_REPLICA_MEMORY_GB = 0.5
RAY_OVERHEAD_GB = 1.5


@dataclass(frozen=True)
class Machine:
    """What Ray will see on this machine when ``horizon serve`` starts it."""

    cpus: float
    memory_gb: float  # available when it starts
    gpus: int = 0
    # All of its memory (what an engine that reserves a share of the machine takes a share of);
    # None: memory_gb.
    total_memory_gb: Optional[float] = None

    @classmethod
    def detect(cls) -> "Machine":
        memory = psutil.virtual_memory()
        return cls(cpus=float(_logical_cpus()), memory_gb=memory.available / 1e9, gpus=_gpu_count(),
                   total_memory_gb=memory.total / 1e9)

    def describe(self) -> str:
        gpus = f", {self.gpus} GPU(s)" if self.gpus else ", no GPU"
        return f"{self.cpus:g} logical CPUs, {self.memory_gb:.1f} GB memory available{gpus}"


@dataclass(frozen=True)
class DeploymentNeed:
    """What one deployment asks Ray for, per replica."""

    name: str
    cpus: float
    gpus: float
    memory_gb: float
    replicas: int
    max_replicas: int
    # Replicas a redeploy starts before stopping old ones (max_surge_percent), and its key.
    surge: int = 0
    surge_key: str = ""
    # Why a replica takes that memory, when it is not plain (the backend's memory_note).
    memory_note: str = ""


@dataclass
class MachineFit:
    machine: Machine
    needs: list[DeploymentNeed]
    errors: list[PlacementError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def cpus_at_start(self) -> float:
        return sum(n.cpus * n.replicas for n in self.needs)

    @property
    def gpus_at_start(self) -> float:
        return sum(n.gpus * n.replicas for n in self.needs)

    @property
    def memory_gb_at_start(self) -> float:
        return RAY_OVERHEAD_GB + sum(n.memory_gb * n.replicas for n in self.needs)

    def summary(self) -> str:
        return (f"fits this machine ({self.machine.describe()}): at start "
                f"{self.cpus_at_start:g} logical CPUs and about {self.memory_gb_at_start:.1f} GB")


def _logical_cpus() -> int:
    """The CPU count Ray detects (it honours cgroup quotas), without starting Ray."""
    try:
        from ray._private.utils import get_num_cpus

        return int(get_num_cpus())
    except Exception:  # noqa: BLE001 — a private helper; the plain count is close enough
        return os.cpu_count() or 1


def _gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()]) \
        if os.path.isdir("/dev") else 0


def surge_replicas(percent: int, replicas: int) -> int:
    """Replicas Ray Serve starts ahead of stopping old ones in a rollout (rounded up, as Ray)."""
    return (percent * replicas + 99) // 100


def deployment_needs(cfg: HorizonConfig, machine: Machine) -> list[DeploymentNeed]:
    server = cfg.global_.server
    needs = [DeploymentNeed("ingress", 0.0, 0.0, INGRESS_REPLICA_MEMORY_GB, server.min_replicas,
                            server.max_replicas, surge_replicas(server.max_surge_percent, server.min_replicas),
                            "global.server.max_surge_percent")]
    # What an engine that reserves a share of the machine takes a share of.
    total = machine.total_memory_gb or machine.memory_gb
    for index, model in enumerate(cfg.models):
        if model.shares_engine_with:
            continue
        s = model.scaling
        initial = s.initial_replicas if s.initial_replicas is not None else s.min_replicas
        kind = backend(model.backend)
        note = kind.memory_note(model)
        needs.append(DeploymentNeed(deployment_name(model.alias), kind.replica_cpus(model),
                                    kind.replica_gpus(model), kind.replica_memory_gb(model, total), initial,
                                    s.max_replicas, surge_replicas(s.max_surge_percent, initial),
                                    f"models[{index}].scaling.max_surge_percent",
                                    f"models[{index}]: {note}" if note else ""))
    return needs


def _check_surge(fit: MachineFit) -> None:
    """A redeploy (any change of the profile's args restarts every deployment) rolls all
    deployments at once; each starts its surge replicas while its old ones still hold their
    resources. A surge that does not fit leaves the rollout waiting forever, the old replicas
    serving: refused here, naming the key."""
    machine = fit.machine
    cpus, gpus, memory = fit.cpus_at_start, fit.gpus_at_start, fit.memory_gb_at_start
    for need in fit.needs:
        if not need.surge:
            continue
        cpus, gpus = cpus + need.cpus * need.surge, gpus + need.gpus * need.surge
        memory += need.memory_gb * need.surge
        short = [what for what, used, has in (("logical CPUs", cpus, machine.cpus), ("GPUs", gpus, machine.gpus),
                                              ("GB of memory", memory, machine.memory_gb))
                 if used > has + 1e-9]
        if short:
            fit.errors.append(PlacementError(need.name, (
                f"{need.surge_key}: a redeploy starts {need.surge} more replica(s) of it before stopping "
                f"the old one(s), and with the other deployments' surges that needs more {' and '.join(short)} "
                f"than this machine has ({machine.describe()}); the rollout would wait forever. Set it to 0 "
                f"(an old replica stops first: the deployment is down while its replacement starts)")))
            return


def check_machine(cfg: HorizonConfig, machine: Optional[Machine] = None) -> MachineFit:
    """Every deployment's initial replicas must fit ``machine`` (errors, in bring-up order);
    replicas that autoscaling could add beyond it are warnings."""
    machine = machine or Machine.detect()
    fit = MachineFit(machine, deployment_needs(cfg, machine))
    cpus = gpus = 0.0
    memory = RAY_OVERHEAD_GB
    resources = {m.alias: m.placement.resources for m in cfg.models
                 if not m.shares_engine_with and m.placement.resources}
    # A cluster profile's node types offer them (the caller says where to deploy it instead).
    why = "" if cfg.cluster is not None else " (a profile without a cluster section runs on one plain node)"
    for alias, wanted in resources.items():
        fit.errors.append(PlacementError(deployment_name(alias), (
            f"asks for custom resources {sorted(wanted)} that Ray does not offer on this machine{why}")))
    for need in fit.needs:
        if fit.errors:
            break
        for _ in range(need.replicas):
            cpus, gpus, memory = cpus + need.cpus, gpus + need.gpus, memory + need.memory_gb
        if cpus > machine.cpus + 1e-9:
            left = machine.cpus - (cpus - need.cpus * need.replicas)
            fit.errors.append(PlacementError(need.name, (
                f"needs {need.cpus:g} logical CPU(s) per replica x {need.replicas}, but only "
                f"{max(left, 0):g} of this machine's {machine.cpus:g} are left after the deployments "
                f"before it; Ray would leave it pending. Lower placement.num_cpus (CPU requests "
                f"are logical) or start on a larger machine")))
            break
        if gpus > machine.gpus + 1e-9:
            fit.errors.append(PlacementError(need.name, (
                f"needs {need.gpus:g} GPU(s) per replica but this machine has {machine.gpus}")))
            break
        if memory > machine.memory_gb + 1e-9:
            fit.errors.append(PlacementError(need.name, (
                f"needs about {need.memory_gb:.1f} GB per replica; with Ray ({RAY_OVERHEAD_GB:g} GB) and the "
                f"deployments before it that is {memory:.1f} GB, more than the {machine.memory_gb:.1f} GB "
                f"available on this machine" + (f" ({need.memory_note})" if need.memory_note else ""))))
            break
    if not fit.errors:
        _check_surge(fit)
    if not fit.errors:
        top_cpus = sum(n.cpus * n.max_replicas for n in fit.needs)
        if top_cpus > machine.cpus + 1e-9:
            fit.warnings.append(
                f"at max_replicas the deployments ask for {top_cpus:g} logical CPUs; this machine has "
                f"{machine.cpus:g}, so replicas beyond that stay pending (autoscaling is capped here)")
    return fit


def report_machine_fit(cfg: HorizonConfig, source: str) -> int:
    """A profile without a cluster runs on this machine: it must fit what Ray will find here."""
    if cfg.cluster is not None:
        print(f"runs on cluster {cfg.cluster.name!r} (check it with: horizon plan {source})")
        return 0
    fit = check_machine(cfg)
    for warning in fit.warnings:
        print(f"note: {warning}")
    if fit.errors:
        for error in fit.errors:
            print(f"{source}: cannot be scheduled on this machine ({fit.machine.describe()}): {error}",
                  file=sys.stderr)
        return 1
    print(fit.summary())
    return 0
