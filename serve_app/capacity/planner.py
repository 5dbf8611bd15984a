"""Capacity arithmetic and placement checks for a profile on its cluster.

Per model: weight memory (parameters x bits), KV-cache bytes per token (K and V x layers x KV
heads x head dim x element size, with KV heads replicated when tensor parallelism exceeds them,
as vLLM does), the KV pool vLLM gets (GPUs x memory x gpu_memory_utilization - weights -
activation reserve, or the size ``kv_cache_memory_bytes`` fixes per device, which on CPU is all
there is to plan), the sequences that fit at a context, and the replicas a target QPS needs
(Little's law over the measured latency and per-replica concurrency, at the tokens a request
keeps in the cache).

Per node type: the GPUs the resident replicas hold at every moment of the day (minimum
replicas raised by ``scaling.schedule`` windows) must fit, and GPUs shared through fractional
placement must not be promised twice, in Ray's accounting or in memory.

``check_placement`` raises the first impossible placement as a :class:`PlacementError`; the app
builder calls it so ``serve run`` refuses what ``horizon plan`` reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from serve_app.config.cluster import ClusterSettings, NodeType
from serve_app.config.loader import ConfigError
from serve_app.config.models import ModelSettings
from serve_app.config.schema import HorizonConfig

from ..fleet.backends import backend
from .errors import PlacementError
from .facts import FactsError, ModelFact, ModelFacts, load_model_facts
from .nodes import candidate_node_types, describe_constraints

GB = 1e9
_MINUTES_PER_DAY = 24 * 60

__all__ = ["GB", "ModelPlan", "NodePlan", "PlacementError", "PlanReport", "check_placement", "plan"]


@dataclass
class ModelPlan:
    alias: str
    backend: str
    workers: int
    gpus_per_replica: float
    node_type: Optional[str] = None
    facts_known: bool = False
    weight_gb: Optional[float] = None
    # Whole memory of the replica's GPUs, and what is left after the weights (the seed's figure).
    replica_gpu_memory_gb: Optional[float] = None
    headroom_gb: Optional[float] = None
    # vLLM's KV pool: memory x gpu_memory_utilization - weights - activation reserve, or the
    # fixed kv_cache_memory_bytes x devices.
    kv_pool_gb: Optional[float] = None
    kv_bytes_per_token: Optional[int] = None
    context_tokens: Optional[int] = None
    sequences_at_context: Optional[int] = None
    concurrency_per_replica: Optional[int] = None
    target_qps: Optional[float] = None
    suggested_replicas: Optional[int] = None
    notes: list[str] = field(default_factory=list)


@dataclass
class NodePlan:
    name: str
    gpus: int
    # Most GPUs resident replicas hold at any time of day, and when that peak starts (HH:MM).
    resident_gpus: float
    resident_peak_at: str
    # GPUs if every pinned deployment ran at max_replicas.
    max_gpus: float
    models: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass
class PlanReport:
    profile: str
    models: list[ModelPlan]
    nodes: list[NodePlan]
    errors: list[PlacementError]

    def model(self, alias: str) -> ModelPlan:
        return next(m for m in self.models if m.alias == alias)

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.name == name)


# --------------------------------------------------------------------------- arithmetic


def weight_bytes(model: ModelSettings, fact: ModelFact, facts: ModelFacts) -> float:
    return fact.params_b * 1e9 * facts.weight_bits(model, fact) / 8


def kv_bytes_per_token(model: ModelSettings, fact: ModelFact, facts: ModelFacts) -> int:
    """KV-cache bytes one token costs across all of a replica's GPUs (0 for encoders)."""
    if fact.kind == "encoder":
        return 0
    tp = model.engine.tensor_parallel_size
    # vLLM splits KV heads across TP ranks; below one head per rank each rank keeps a copy.
    stored_kv_heads = max(fact.kv_heads, tp)
    return int(2 * fact.layers * stored_kv_heads * fact.head_dim * facts.kv_bytes_per_element(model))


def _hhmm_to_minutes(value: str) -> int:
    hours, minutes = value.split(":")
    return int(hours) * 60 + int(minutes)


def _minutes_to_hhmm(value: int) -> str:
    return f"{value // 60:02d}:{value % 60:02d}"


def replicas_at(model: ModelSettings, minute: int) -> int:
    """Minimum replicas at a minute of the day: min_replicas raised by any open schedule window."""
    count = model.scaling.min_replicas
    for window in model.scaling.schedule:
        start, end = _hhmm_to_minutes(window.start), _hhmm_to_minutes(window.end)
        # A window whose end is not after its start wraps past midnight.
        is_open = start <= minute < end if start < end else (minute >= start or minute < end)
        if is_open:
            count = max(count, window.min_replicas)
    return count


def _checkpoints(models: list[ModelSettings]) -> list[int]:
    points = {0}
    for m in models:
        for w in m.scaling.schedule:
            points.add(_hhmm_to_minutes(w.start) % _MINUTES_PER_DAY)
            points.add(_hhmm_to_minutes(w.end) % _MINUTES_PER_DAY)
    return sorted(points)


# --------------------------------------------------------------------------- per model


def _check_parallelism(model: ModelSettings, fact: ModelFact) -> Optional[str]:
    tp = model.engine.tensor_parallel_size
    if fact.attention_heads % tp:
        return (f"tensor_parallel_size {tp} does not divide the {fact.attention_heads} attention "
                f"heads of {model.engine.model}")
    if fact.kv_heads % tp and tp % fact.kv_heads:
        return (f"tensor_parallel_size {tp} neither divides nor is a multiple of the "
                f"{fact.kv_heads} KV heads of {model.engine.model}")
    if model.engine.pipeline_parallel_size > fact.layers:
        return f"pipeline_parallel_size {model.engine.pipeline_parallel_size} exceeds {fact.layers} layers"
    return None


def _pick_node(model: ModelSettings, cluster: ClusterSettings,
               errors: list[PlacementError]) -> Optional[NodeType]:
    """The node type the replica lands on, after the count checks; None (with an error) if none."""
    candidates = candidate_node_types(model, cluster)
    if not candidates:
        errors.append(PlacementError(model.alias, f"no node type of cluster {cluster.name!r} offers "
                                                  f"{describe_constraints(model)}"))
        return None
    gpus = backend(model.backend).replica_gpus(model)
    cpus = model.placement.num_cpus * backend(model.backend).workers(model)
    one_node = model.engine.pipeline_parallel_size == 1 or model.placement.placement_group_strategy == "STRICT_PACK"
    for node in candidates:
        gpu_room = node.gpus if one_node else node.gpus * node.count
        cpu_room = node.cpus if one_node else node.cpus * node.count
        if gpus <= gpu_room and cpus <= cpu_room:
            return node
    node = candidates[0]
    how = f"tensor_parallel_size {model.engine.tensor_parallel_size}" if backend(model.backend).workers(model) > 1 else "one worker"
    if gpus > (node.gpus if one_node else node.gpus * node.count):
        reason = (f"a replica needs {gpus:g} GPUs ({how} x {model.placement.num_gpus:g} GPU) but node "
                  f"type {node.name!r} has {node.gpus} per node")
    else:
        reason = f"a replica needs {cpus:g} CPUs but node type {node.name!r} has {node.cpus}"
    errors.append(PlacementError(model.alias, reason))
    return None


def _plan_memory(mp: ModelPlan, model: ModelSettings, fact: ModelFact, facts: ModelFacts,
                 node: Optional[NodeType], cluster: Optional[ClusterSettings],
                 context_tokens: Optional[int], errors: list[PlacementError]) -> None:
    weights = weight_bytes(model, fact, facts)
    mp.weight_gb = weights / GB
    is_decoder = fact.kind == "decoder"
    # An encoder keeps no KV cache: context and sequences do not apply.
    mp.kv_bytes_per_token = kv_bytes_per_token(model, fact, facts) if is_decoder else None
    mp.context_tokens = (context_tokens or model.engine.max_model_len) if is_decoder else None
    if is_decoder and context_tokens and context_tokens > model.engine.max_model_len:
        mp.notes.append(f"context {context_tokens} is above max_model_len {model.engine.max_model_len} (what-if)")
    engine = backend(model.backend)
    # Positions extended, or vLLM told to allow a window past them (its own escape hatch).
    stretched = (bool({"rope_scaling", "hf_overrides"} & set(model.engine.engine_kwargs))
                 or model.engine.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in ("1", "true"))
    if (is_decoder and engine.holds_weights and engine.has_kv_cache and not stretched
            and model.engine.max_model_len > fact.max_position_embeddings):
        errors.append(PlacementError(model.alias, f"max_model_len {model.engine.max_model_len} is above the "
                                                  f"{fact.max_position_embeddings} positions the model has "
                                                  f"(max_position_embeddings in the facts file); vLLM would "
                                                  f"refuse to start"))
    # A cache size the profile fixes (vLLM's kv_cache_memory_bytes, per device) replaces the
    # share of memory vLLM would otherwise give it.
    fixed_kv = engine.kv_cache_bytes(model) if is_decoder and engine.has_kv_cache else None
    if node is None or cluster is None or node.gpus == 0:
        if fixed_kv is not None:  # an engine on CPU: its cache is all the planner can size
            _fill_kv_pool(mp, model, fixed_kv * engine.workers(model), engine.holds_weights, errors)
        return
    reserve = cluster.planning.activation_reserve_gb_per_gpu * GB
    workers = backend(model.backend).workers(model)
    share = model.placement.num_gpus
    whole_gpus = math.ceil(share) * workers
    # Memory of the replica's GPUs, or of its share of a GPU it shares.
    mp.replica_gpu_memory_gb = (whole_gpus if share >= 1 else share * workers) * node.gpu_memory_gb
    mp.headroom_gb = mp.replica_gpu_memory_gb - mp.weight_gb
    is_engine = backend(model.backend).holds_weights
    if not backend(model.backend).has_kv_cache or not is_decoder:
        need = weights + reserve
        room = share * workers * node.gpu_memory_gb * GB
        if is_engine and need > room:
            errors.append(PlacementError(model.alias, f"needs {need / GB:.1f} GB (weights + activation reserve) "
                                                      f"but its {share:g} GPU share of {node.gpu_memory_gb:g} GB "
                                                      f"is {room / GB:.1f} GB"))
        return
    util = model.engine.gpu_memory_utilization
    if share < 1 and util > share + 1e-9:
        errors.append(PlacementError(model.alias, f"gpu_memory_utilization {util:g} exceeds its {share:g} "
                                                  f"share of a shared GPU: it would take memory promised "
                                                  f"to its neighbours"))
    if fixed_kv is not None:
        # Each worker's GPU holds its slice of the weights, the fixed cache and the reserve.
        room = min(share, 1.0) * node.gpu_memory_gb * GB
        need = weights / workers + fixed_kv + reserve
        if is_engine and need > room:
            errors.append(PlacementError(model.alias, f"weights {weights / workers / GB:.1f} GB + "
                                                      f"kv_cache_memory_bytes {fixed_kv / GB:.1f} GB + activation "
                                                      f"reserve {reserve / GB:g} GB per GPU do not fit its "
                                                      f"{room / GB:.1f} GB"))
        _fill_kv_pool(mp, model, fixed_kv * workers, is_engine, errors)
        return
    budget = whole_gpus * node.gpu_memory_gb * GB * util
    pool = budget - weights - reserve * whole_gpus
    if weights > budget:
        if is_engine:
            errors.append(PlacementError(model.alias, f"weights {weights / GB:.1f} GB do not fit the "
                                                      f"{budget / GB:.1f} GB vLLM may use on {whole_gpus} x "
                                                      f"{node.gpu_memory_gb:g} GB at gpu_memory_utilization {util:g}"))
        mp.kv_pool_gb = pool / GB
        mp.sequences_at_context = 0
        return
    _fill_kv_pool(mp, model, pool, is_engine, errors)


def _fill_kv_pool(mp: ModelPlan, model: ModelSettings, pool: float, is_engine: bool,
                  errors: list[PlacementError]) -> None:
    """The KV pool's size and the sequences it holds at the plan's context; a pool that cannot
    hold one ``max_model_len`` sequence is an impossible placement."""
    mp.kv_pool_gb = pool / GB
    per_seq_max_len = mp.kv_bytes_per_token * model.engine.max_model_len
    if is_engine and pool < per_seq_max_len:
        errors.append(PlacementError(model.alias, f"KV pool {pool / GB:.1f} GB cannot hold one sequence of "
                                                  f"max_model_len {model.engine.max_model_len} "
                                                  f"({per_seq_max_len / GB:.1f} GB); vLLM would refuse to start"))
    mp.sequences_at_context = max(0, math.floor(pool / (mp.kv_bytes_per_token * mp.context_tokens)))


def _plan_replicas(mp: ModelPlan, model: ModelSettings, fact: ModelFact, qps: Optional[float],
                   tokens: Optional[int] = None, latency_s: Optional[float] = None) -> None:
    """Concurrency per replica and the replicas ``qps`` needs. ``tokens`` (prompt + completion
    a request keeps in the KV cache) replaces the facts' average; ``latency_s`` is the mean
    time a request may take, which replicas cannot buy."""
    if fact.measured is None:
        if tokens is not None or latency_s is not None:
            mp.notes.append("no measured figures in the facts file: tokens and latency targets not planned")
        return
    m = fact.measured
    tokens = tokens or m.tokens_per_request
    concurrency = m.max_concurrency
    if mp.kv_pool_gb is not None and mp.kv_bytes_per_token:
        fit = math.floor(mp.kv_pool_gb * GB / (mp.kv_bytes_per_token * tokens))
        if fit < concurrency:
            mp.notes.append(f"KV cache limits concurrency to {fit} at {tokens} tokens/request")
        concurrency = max(1, min(concurrency, fit))
    mp.concurrency_per_replica = concurrency
    if latency_s is not None and m.total_s > latency_s:
        mp.notes.append(f"measured mean latency {m.total_s:g} s is above the {latency_s:g} s target: replicas "
                        f"add throughput, not speed (a faster GPU, a quantised or smaller model, or shorter "
                        f"answers)")
    if qps is None:
        return
    mp.target_qps = qps
    # Little's law: requests in flight = arrival rate x time in system.
    mp.suggested_replicas = max(1, math.ceil(qps * m.total_s / concurrency))
    if mp.suggested_replicas > model.scaling.max_replicas:
        mp.notes.append(f"{qps:g} QPS needs {mp.suggested_replicas} replicas; scaling.max_replicas is "
                        f"{model.scaling.max_replicas}")


# --------------------------------------------------------------------------- per node


def _plan_node(node: NodeType, pinned: list[ModelSettings], errors: list[PlacementError]) -> NodePlan:
    capacity = node.gpus * node.count
    peak, peak_at, peak_detail = 0.0, 0, ""
    for minute in _checkpoints(pinned):
        demand = {m.alias: replicas_at(m, minute) * backend(m.backend).replica_gpus(m) for m in pinned}
        total = sum(demand.values())
        if total > peak:
            peak, peak_at = total, minute
            peak_detail = ", ".join(f"{a} {g:g}" for a, g in demand.items() if g)
    plan = NodePlan(name=node.name, gpus=capacity, resident_gpus=peak,
                    resident_peak_at=_minutes_to_hhmm(peak_at),
                    max_gpus=sum(m.scaling.max_replicas * backend(m.backend).replica_gpus(m) for m in pinned),
                    models=[m.alias for m in pinned])
    if peak > capacity + 1e-9:
        errors.append(PlacementError(" + ".join(m.alias for m in pinned if replicas_at(m, peak_at)),
                                     f"from {plan.resident_peak_at} the resident replicas need {peak:g} GPUs "
                                     f"({peak_detail}) but node type {node.name!r} has {capacity}"))
    elif plan.max_gpus > capacity + 1e-9:
        plan.notes.append(f"at max_replicas the deployments want {plan.max_gpus:g} of {capacity} GPUs: "
                          f"replicas above that wait for GPUs freed by scale-down (time-shared)")
    return plan


def _check_shared_gpu_memory(node: NodeType, pinned: list[ModelSettings], cluster: ClusterSettings,
                             facts: Optional[ModelFacts], errors: list[PlacementError]) -> None:
    """Deployments sharing GPUs through fractions must not promise the same memory twice."""
    shared = [m for m in pinned if 0 < m.placement.num_gpus < 1 and backend(m.backend).holds_weights]
    if not shared or node.gpus * node.count > 1:
        # Ray packs fractions onto one GPU only on a single-GPU node type; elsewhere the
        # per-deployment checks above are what can be verified.
        return
    used = 0.0
    for m in shared:
        claimed = backend(m.backend).gpu_memory_share(m)
        if claimed is not None:
            used += claimed
        elif facts is not None and (fact := facts.for_model(m)) is not None:
            used += (weight_bytes(m, fact, facts) / GB + cluster.planning.activation_reserve_gb_per_gpu) / node.gpu_memory_gb
    if used > 1 + 1e-9:
        errors.append(PlacementError(" + ".join(m.alias for m in shared),
                                     f"together claim {used:.0%} of the {node.gpu_memory_gb:g} GB GPU of "
                                     f"node type {node.name!r}"))


# --------------------------------------------------------------------------- entry points


def plan(cfg: HorizonConfig, facts: ModelFacts, *, context_tokens: int | None = None,
         target_qps: dict | None = None, tokens_per_request: dict | None = None,
         target_latency_s: dict | None = None) -> PlanReport:
    """Figures and problems of a profile; never raises for a bad placement (see ``errors``).
    Per alias: ``target_qps`` (requests/s), ``tokens_per_request`` (instead of the facts'
    average), ``target_latency_s`` (mean seconds a request may take)."""
    target_qps, tokens_per_request, target_latency_s = (target_qps or {}, tokens_per_request or {},
                                                        target_latency_s or {})
    for what, given in (("target QPS", target_qps), ("tokens per request", tokens_per_request),
                        ("target latency", target_latency_s)):
        unknown = sorted(set(given) - set(cfg.aliases))
        if unknown:
            raise ValueError(f"{what} given for unknown models {unknown}")
    errors: list[PlacementError] = []
    cluster = cfg.cluster
    plans: list[ModelPlan] = []
    pinned: dict[str, list[ModelSettings]] = {}
    for model in cfg.models:
        if model.shares_engine_with:
            continue
        mp = ModelPlan(alias=model.alias, backend=model.backend, workers=backend(model.backend).workers(model),
                       gpus_per_replica=backend(model.backend).replica_gpus(model))
        plans.append(mp)
        kind = backend(model.backend)
        errors += [PlacementError(model.alias, problem)
                   for problem in kind.placement_problems(model, on_cluster=cluster is not None)]
        node = None
        if cluster is not None and model.placement.num_gpus > 0:
            node = _pick_node(model, cluster, errors)
            if node is not None:
                mp.node_type = node.name
                if len(candidate_node_types(model, cluster)) == 1:
                    pinned.setdefault(node.name, []).append(model)
        fact = facts.for_model(model)
        if fact is None:
            mp.notes.append("no model facts: memory not planned")
            continue
        mp.facts_known = True
        if kind.shards_heads:
            problem = _check_parallelism(model, fact)
            if problem:
                errors.append(PlacementError(model.alias, problem))
        try:
            _plan_memory(mp, model, fact, facts, node, cluster, context_tokens, errors)
        except KeyError as exc:
            errors.append(PlacementError(model.alias, str(exc.args[0])))
            continue
        _plan_replicas(mp, model, fact, target_qps.get(model.alias), tokens_per_request.get(model.alias),
                       target_latency_s.get(model.alias))
    nodes: list[NodePlan] = []
    if cluster is not None:
        for node in cluster.node_types:
            members = pinned.get(node.name, [])
            nodes.append(_plan_node(node, members, errors))
            _check_shared_gpu_memory(node, members, cluster, facts, errors)
    return PlanReport(profile=cfg.profile, models=plans, nodes=nodes, errors=errors)


def facts_for(cfg: HorizonConfig) -> Optional[ModelFacts]:
    """The facts file a GPU profile names (it must exist); for a CPU profile the default, if any."""
    if cfg.cluster is not None:
        try:
            return load_model_facts(cfg.cluster.planning.facts_file)
        except FactsError as exc:  # the profile's key is what the operator has to fix
            problems = "; ".join(f"{key}: {msg}" if key else msg for key, msg in exc.errors)
            raise ConfigError(f"profile {cfg.profile!r}",
                              [("cluster.planning.facts_file", f"{exc.source}: {problems}")]) from None
    try:
        return load_model_facts()
    except FactsError:
        return None


def check_placement(cfg: HorizonConfig, facts: ModelFacts | None = None) -> None:
    """Raise :class:`PlacementError` for the first placement that cannot work; None when all fit.

    Without facts (none given and no facts file found) only the counting checks run.
    """
    facts = facts if facts is not None else (facts_for(cfg) or ModelFacts())
    report = plan(cfg, facts)
    if report.errors:
        raise report.errors[0]
