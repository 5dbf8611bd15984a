"""Pydantic schema of a K2 Horizon profile.

A profile is one YAML file under ``configs/``. It is a Ray Serve config file whose single
application's ``args`` hold the Horizon settings validated here, so ``serve run configs/X.yaml``
and ``horizon`` commands read the very same file. Every model here forbids unknown keys: an
operator's typo must fail at load with the path of the key, never be silently ignored.

Key names follow vLLM Semantic Router where the concepts overlap (``global.router``,
``routing.decisions[]`` with ``rules``/``modelRefs``/``algorithm``).

This module imports nothing else of the project: everyone imports it.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The seven task types (intents) of SPEC §4. Routing, sessions, fallbacks and priorities are
# keyed by them, so they are a closed set validated everywhere.
TaskType = Literal["chat", "reasoning", "code", "vision", "summary", "safety", "unknown"]
TASK_TYPES: tuple[str, ...] = ("chat", "reasoning", "code", "vision", "summary", "safety", "unknown")


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, aliases allowed."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)


# --------------------------------------------------------------------------- global


class RouterSettings(Strict):
    # Request ``model`` values that run full signal + decision evaluation.
    auto_model_names: list[str] = Field(default_factory=lambda: ["vllm-sr/auto", "auto", "MoM"])


class FusionSlugs(Strict):
    # Request ``model`` values that run Fusion-only decision evaluation.
    model_names: list[str] = Field(default_factory=lambda: ["vllm-sr/fusion"])


class LooperSettings(Strict):
    fusion: FusionSlugs = Field(default_factory=FusionSlugs)


class IntegrationSettings(Strict):
    looper: LooperSettings = Field(default_factory=LooperSettings)


class ServerSettings(Strict):
    """Ingress HTTP behaviour."""

    max_request_body_bytes: int = Field(10 * 1024 * 1024, gt=0)
    # Ingress deployment sizing; the ingress is stateless and scales like any deployment.
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(1, ge=1)
    max_ongoing_requests: int = Field(256, ge=1)
    # Log prompts/completions only when an operator explicitly allows it.
    log_payloads: bool = False
    # Seconds a client is told to wait on 429/503 responses.
    retry_after_s: int = Field(1, ge=0)


class GlobalSettings(Strict):
    router: RouterSettings = Field(default_factory=RouterSettings)
    integrations: IntegrationSettings = Field(default_factory=IntegrationSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)


# --------------------------------------------------------------------------- models


class EngineSettings(Strict):
    """Engine settings shared by every backend kind.

    For ``vllm`` these map 1:1 onto vLLM engine arguments; ``engine_kwargs`` passes any other
    vLLM engine argument through unchanged. For ``simulated`` models ``max_model_len`` still
    bounds the context so context-length handling behaves as on the real fleet.
    """

    model: str = Field(..., min_length=1, description="HF model id or local path")
    served_model_name: Optional[str] = None
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    quantization: Optional[str] = None
    max_model_len: int = Field(4096, gt=0)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    dtype: str = "auto"
    enforce_eager: bool = False
    max_num_seqs: Optional[int] = Field(None, ge=1)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    # Multimodal limits (vLLM ``limit_mm_per_prompt``), e.g. {"image": 4}.
    limit_mm_per_prompt: Optional[dict[str, int]] = None
    # Environment for the engine's worker processes (e.g. VLLM_CPU_KVCACHE_SPACE on CPU).
    env: dict[str, str] = Field(default_factory=dict)


class EmbeddingSettings(Strict):
    """FlagEmbedding settings for ``backend: embedding``."""

    # ``bge-m3`` uses BGEM3FlagModel; ``flag`` uses FlagModel (e.g. the packaged MiniLM).
    model_class: Literal["bge-m3", "flag"] = "flag"
    pooling_method: Literal["cls", "mean"] = "cls"
    use_fp16: bool = False
    max_length: int = Field(512, gt=0)
    # Request batching through @serve.batch.
    max_batch_size: int = Field(32, ge=1)
    batch_wait_timeout_s: float = Field(0.002, ge=0)


class SimulatedSettings(Strict):
    """Latency/failure profile of the simulated engine (load and fault tests only)."""

    ttft_ms: float = Field(100.0, ge=0)
    tpot_ms: float = Field(10.0, ge=0, description="time per output token")
    output_tokens: int = Field(32, ge=0, description="tokens generated when max_tokens is not set")
    max_num_seqs: int = Field(8, ge=1, description="sequences decoded at once; the rest wait")
    # Multiplies ttft_ms and tpot_ms so one profile can run at real or test speed.
    latency_scale: float = Field(1.0, ge=0)
    error_rate: float = Field(0.0, ge=0, le=1)
    empty_rate: float = Field(0.0, ge=0, le=1)
    hang_rate: float = Field(0.0, ge=0, le=1, description="share of requests that never answer")
    # How generated text is wrapped: plain prose, JSON, fenced JSON or deliberately broken JSON.
    output_style: Literal["text", "json", "fenced_json", "broken_json"] = "text"
    seed: int = 0


class PlacementSettings(Strict):
    """Ray placement of one replica."""

    num_cpus: float = Field(1.0, ge=0)
    # Fractional values let several deployments share one GPU (node C of the fleet).
    num_gpus: float = Field(0.0, ge=0)
    accelerator_type: Optional[str] = None
    resources: dict[str, float] = Field(default_factory=dict)
    # Ray node labels the replica must land on (label_selector).
    node_labels: dict[str, str] = Field(default_factory=dict)
    placement_group_strategy: Literal["PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"] = "PACK"
    memory_gb: Optional[float] = Field(None, gt=0)


class ScheduleWindow(Strict):
    """Minimum replicas while a daily time window (UTC, HH:MM) is open."""

    start: str = Field(..., pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    end: str = Field(..., pattern=r"^([01]\d|2[0-4]):[0-5]\d$")
    min_replicas: int = Field(..., ge=0)


class ScalingSettings(Strict):
    """Replicas, admission bounds and autoscaling of one deployment."""

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    initial_replicas: Optional[int] = Field(None, ge=0)
    # Ray Serve admission: requests a replica runs at once and the bounded queue in front.
    max_ongoing_requests: int = Field(32, ge=1)
    max_queued_requests: int = Field(-1, ge=-1, description="-1 = unbounded (Ray Serve default)")
    # Autoscaling on queue depth: requests waiting per replica the policy aims for.
    target_queue_per_replica: float = Field(2.0, gt=0)
    target_ongoing_requests: float = Field(8.0, gt=0)
    policy: Literal["queue_depth", "ongoing_requests"] = "queue_depth"
    upscale_delay_s: float = Field(5.0, ge=0)
    downscale_delay_s: float = Field(60.0, ge=0)
    metrics_interval_s: float = Field(1.0, gt=0)
    schedule: list[ScheduleWindow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bounds(self) -> "ScalingSettings":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        if self.initial_replicas is not None and not (
            self.min_replicas <= self.initial_replicas <= self.max_replicas
        ):
            raise ValueError("initial_replicas must lie within [min_replicas, max_replicas]")
        return self

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas > self.min_replicas or bool(self.schedule)


class TimeoutSettings(Strict):
    """Per-model deadlines (SPEC §6: k2 120 s, text 60 s, vision 30 s)."""

    first_token_s: float = Field(60.0, gt=0)
    total_s: float = Field(60.0, gt=0)


class SamplingDefaults(Strict):
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    max_tokens: Optional[int] = Field(None, ge=1)


ModelRole = Literal["coordinator", "chat", "reasoning", "code", "vision", "embedding"]
Backend = Literal["vllm", "embedding", "simulated"]


class ModelSettings(Strict):
    """One fleet member: a Ray Serve deployment of its own."""

    alias: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    role: ModelRole
    backend: Backend
    description: str = ""
    engine: EngineSettings
    embedding: Optional[EmbeddingSettings] = None
    simulated: Optional[SimulatedSettings] = None
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    sampling: SamplingDefaults = Field(default_factory=SamplingDefaults)
    # Serve this alias with another alias's deployment instead of starting an engine of its
    # own (the CPU profile runs one tiny engine for all text roles). Its own engine section
    # still describes the model for planning and context limits.
    shares_engine_with: Optional[str] = None

    @model_validator(mode="after")
    def _backend_sections(self) -> "ModelSettings":
        if self.backend == "embedding" and self.embedding is None:
            self.embedding = EmbeddingSettings()
        if self.backend == "simulated" and self.simulated is None:
            self.simulated = SimulatedSettings()
        if self.backend != "embedding" and self.embedding is not None:
            raise ValueError("'embedding' section is only valid with backend: embedding")
        if self.backend != "simulated" and self.simulated is not None:
            raise ValueError("'simulated' section is only valid with backend: simulated")
        if self.backend == "embedding" and self.role != "embedding":
            raise ValueError("backend: embedding requires role: embedding")
        return self


class UnavailableModel(Strict):
    """A fleet alias this profile does not serve: requests to it get a clear error."""

    alias: str
    role: ModelRole
    reason: str


# --------------------------------------------------------------------------- routing


class Condition(Strict):
    """Leaf of a rule tree: the named match of one signal type, e.g. {type: intent, name: code}."""

    type: str = Field(..., min_length=1)
    name: str = Field(..., min_length=1)


class RuleNode(Strict):
    """Recursive boolean rule: AND / OR over conditions, NOT over exactly one."""

    operator: Literal["AND", "OR", "NOT"] = "AND"
    conditions: list[Union["RuleNode", Condition]] = Field(..., min_length=1)

    @model_validator(mode="after")
    def _not_has_one(self) -> "RuleNode":
        if self.operator == "NOT" and len(self.conditions) != 1:
            raise ValueError("NOT takes exactly one condition")
        return self


RuleNode.model_rebuild()


class ModelRef(Strict):
    model: str
    weight: float = Field(1.0, ge=0)


class AnalysisOverride(Strict):
    temperature: Optional[float] = Field(None, ge=0, le=2)
    max_completion_tokens: Optional[int] = Field(None, ge=1)


class GroundingSettings(Strict):
    enabled: bool = False
    reference: Literal["hybrid", "context", "panel"] = "panel"
    policy: Literal["weight", "annotate", "filter"] = "annotate"
    min_score: float = Field(0.5, ge=-1, le=1)
    min_keep: int = Field(1, ge=1)


class FusionParams(Strict):
    """Every Fusion parameter of SPEC §5; None means "use the documented default"."""

    model: Optional[str] = None
    analysis_models: Optional[list[str]] = None
    analysis_mode: Literal["separate", "one_call", "none"] = "separate"
    analysis_overrides: dict[str, AnalysisOverride] = Field(default_factory=dict)
    max_concurrent: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    round_timeout_seconds: Optional[float] = Field(None, gt=0)
    min_successful_responses: Optional[int] = Field(None, ge=1)
    on_error: Literal["skip", "fail"] = "skip"
    include_analysis: bool = True
    include_intermediate_responses: bool = True
    analysis_template: Optional[str] = None
    synthesis_template: Optional[str] = None
    judge_prompt_version: str = "fusion-v1"
    grounding: GroundingSettings = Field(default_factory=GroundingSettings)


class Algorithm(Strict):
    type: Literal["static", "fusion"] = "static"
    fusion: Optional[FusionParams] = None

    @model_validator(mode="after")
    def _fusion_params(self) -> "Algorithm":
        if self.type == "fusion" and self.fusion is None:
            self.fusion = FusionParams()
        if self.type != "fusion" and self.fusion is not None:
            raise ValueError("'fusion' parameters are only valid with type: fusion")
        return self


class Decision(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    priority: int = 0
    # No rules = matches every request (use it for the default decision).
    rules: Optional[RuleNode] = None
    model_refs: list[ModelRef] = Field(..., alias="modelRefs", min_length=1)
    algorithm: Algorithm = Field(default_factory=Algorithm)
    output_contract: Optional[str] = None
    # A decision may refuse instead of generating (e.g. the safety decision).
    refusal: Optional[str] = None


class RoutingSettings(Strict):
    decisions: list[Decision] = Field(..., min_length=1)
    default_decision: str
    # Temperature by task type when a request sets none (SPEC §7 sampling matrix).
    sampling_matrix: dict[str, float] = Field(default_factory=dict)
    # Per-signal settings owned by the routing package (thresholds, template files, ...).
    signals: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> "RoutingSettings":
        names = [d.name for d in self.decisions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate decision names: {dupes}")
        if self.default_decision not in names:
            raise ValueError(f"default_decision {self.default_decision!r} is not a decision name")
        return self


# --------------------------------------------------------------------------- resilience


class BreakerSettings(Strict):
    failure_threshold: int = Field(5, ge=1)
    window_s: float = Field(30.0, gt=0)
    probe_interval_s: float = Field(10.0, gt=0)
    half_open_max_inflight: int = Field(1, ge=1)
    # Successful probes needed, each admitting more traffic, before fully closed.
    recovery_steps: int = Field(3, ge=1)


class DegradeRule(Strict):
    model: str
    max_queue_wait_s: float = Field(..., gt=0)
    target: str
    share: float = Field(0.5, ge=0, le=1)


class ResilienceSettings(Strict):
    fallback_chains: dict[str, list[str]] = Field(default_factory=dict)
    max_fallback_depth: int = Field(1, ge=0)
    # Task types whose failure returns this message instead of falling back (vision).
    no_fallback_messages: dict[str, str] = Field(default_factory=dict)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    # Queue priority class per task type; lower number is served first.
    priorities: dict[str, int] = Field(default_factory=dict)
    degrade: list[DegradeRule] = Field(default_factory=list)

    @field_validator("fallback_chains", "priorities", "no_fallback_messages")
    @classmethod
    def _task_keys(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"unknown task types {unknown}; expected one of {list(TASK_TYPES)}")
        return value


# --------------------------------------------------------------------------- root


class SimulationSettings(Strict):
    # Multiplies every simulated model's latencies (1.0 = the SPEC §2 figures).
    latency_scale: float = Field(1.0, ge=0)


class HorizonConfig(Strict):
    """A whole profile (the ``args`` of the Ray Serve application)."""

    profile: str = Field(..., min_length=1)
    description: str = ""
    global_: GlobalSettings = Field(default_factory=GlobalSettings, alias="global")
    models: list[ModelSettings] = Field(..., min_length=1)
    unavailable_models: list[UnavailableModel] = Field(default_factory=list)
    simulation: SimulationSettings = Field(default_factory=SimulationSettings)
    routing: RoutingSettings
    resilience: ResilienceSettings = Field(default_factory=ResilienceSettings)
    # Sections owned by later packages (sessions, auth, observability) validate themselves.
    sessions: dict[str, Any] = Field(default_factory=dict)
    auth: dict[str, Any] = Field(default_factory=dict)

    # ------------------------------------------------------------------ lookups
    def model(self, alias: str) -> ModelSettings:
        for m in self.models:
            if m.alias == alias:
                return m
        raise KeyError(alias)

    @property
    def aliases(self) -> list[str]:
        return [m.alias for m in self.models]

    @property
    def embedding_model(self) -> Optional[ModelSettings]:
        return next((m for m in self.models if m.backend == "embedding"), None)

    def decision(self, name: str) -> Decision:
        for d in self.routing.decisions:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def fusion_slugs(self) -> list[str]:
        return self.global_.integrations.looper.fusion.model_names

    @property
    def auto_slugs(self) -> list[str]:
        return self.global_.router.auto_model_names

    # ------------------------------------------------------------------ cross-checks
    @model_validator(mode="after")
    def _cross_references(self) -> "HorizonConfig":
        aliases = [m.alias for m in self.models]
        dupes = sorted({a for a in aliases if aliases.count(a) > 1})
        if dupes:
            raise ValueError(f"models: duplicate aliases {dupes}")
        known = set(aliases) | {u.alias for u in self.unavailable_models}
        slugs = set(self.fusion_slugs) | set(self.auto_slugs)
        clash = sorted(slugs & known)
        if clash:
            raise ValueError(f"global: routing slugs {clash} collide with model aliases")
        for i, m in enumerate(self.models):
            if m.shares_engine_with is not None:
                if m.shares_engine_with not in aliases or m.shares_engine_with == m.alias:
                    raise _PathError(f"models[{i}].shares_engine_with",
                                     f"unknown model {m.shares_engine_with!r}")
                owner = self.model(m.shares_engine_with)
                if owner.shares_engine_with is not None:
                    raise _PathError(f"models[{i}].shares_engine_with",
                                     "must name a model that owns its engine")
        for i, d in enumerate(self.routing.decisions):
            for j, ref in enumerate(d.model_refs):
                if ref.model in slugs:
                    raise _PathError(f"routing.decisions[{i}].modelRefs[{j}].model",
                                     f"{ref.model!r} is a routing slug, not a model (no recursive Fusion)")
                if ref.model not in known:
                    raise _PathError(f"routing.decisions[{i}].modelRefs[{j}].model",
                                     f"unknown model {ref.model!r}")
        for task, chain in self.resilience.fallback_chains.items():
            for j, alias in enumerate(chain):
                if alias not in known:
                    raise _PathError(f"resilience.fallback_chains.{task}[{j}]", f"unknown model {alias!r}")
        for i, rule in enumerate(self.resilience.degrade):
            for key in ("model", "target"):
                if getattr(rule, key) not in known:
                    raise _PathError(f"resilience.degrade[{i}].{key}",
                                     f"unknown model {getattr(rule, key)!r}")
        return self


class _PathError(ValueError):
    """A cross-reference error that knows the exact path of the offending key."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message
