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


# --------------------------------------------------------------------------- sessions


class SessionSettings(Strict):
    """Conversation history per client session, one bucket per task type (SPEC §7).

    A request forwards only its own task type's bucket, so code history never inflates a chat
    model's context. See docs/sessions.md.
    """

    enabled: bool = True
    # ``inprocess`` keeps history in the ingress replica (single replica / development);
    # ``redis`` shares it across ingress replicas and restarts.
    backend: Literal["inprocess", "redis"] = "inprocess"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Every Redis key is ``{key_prefix}{session_id}:{task_type}``.
    key_prefix: str = Field("horizon:session:", min_length=1)
    # Idle lifetime of a bucket, refreshed on every write (24 h per SPEC §7).
    ttl_s: float = Field(86400.0, gt=0)
    # Newest messages kept per bucket; older ones are dropped when a turn is appended.
    max_messages: int = Field(200, ge=2)
    # Request header naming the session; without it a request is stateless.
    header: str = Field("X-Session-ID", min_length=1)
    max_session_id_length: int = Field(128, ge=8, le=1024)
    # Per-command Redis deadline: an unreachable Redis must cost a request milliseconds, not
    # seconds, because the request is then served without history anyway.
    redis_timeout_s: float = Field(0.25, gt=0)
    # Buckets the in-process store keeps before evicting the least recently written.
    inprocess_max_buckets: int = Field(10000, ge=1)
    # Tokens of the target model's context left free for the answer when trimming history
    # (used when the request sets no max_tokens).
    output_reserve_tokens: int = Field(1024, ge=0)


# --------------------------------------------------------------------------- auth


class ApiKeySettings(Strict):
    """One API key. The plain key is never in the profile: give its SHA-256 (``horizon
    hash-key``) or the name of an environment variable holding it (hashed at startup)."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    sha256: Optional[str] = Field(None, pattern=r"^[0-9a-f]{64}$")
    env: Optional[str] = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # None = no restriction; a list restricts to those fleet aliases / decision names.
    allowed_models: Optional[list[str]] = None
    allowed_decisions: Optional[list[str]] = None
    fusion_allowed: bool = True
    # Token bucket per key: refills at requests_per_minute / 60 per second; None = unlimited.
    requests_per_minute: Optional[int] = Field(None, ge=1)
    # Requests a key may send at once after being idle; default: requests_per_minute.
    burst: Optional[int] = Field(None, ge=1)

    @field_validator("sha256", mode="before")
    @classmethod
    def _lower_hex(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> "ApiKeySettings":
        if (self.sha256 is None) == (self.env is None):
            raise ValueError("give exactly one of 'sha256' (hex digest of the key) or 'env' "
                             "(environment variable holding the key)")
        return self


class AuthSettings(Strict):
    """Optional Bearer API keys with per-key permissions and rate limits."""

    enabled: bool = False
    keys: list[ApiKeySettings] = Field(default_factory=list)

    @model_validator(mode="after")
    def _keys(self) -> "AuthSettings":
        if self.enabled and not self.keys:
            raise _PathError("keys", "auth is enabled but no keys are configured")
        names = [k.name for k in self.keys]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise _PathError("keys", f"duplicate key names: {dupes}")
        digests = [k.sha256 for k in self.keys if k.sha256]
        if len(digests) != len(set(digests)):
            raise _PathError("keys", "two keys share one sha256")
        return self


# --------------------------------------------------------------------------- observability


def _ascending_positive(value: list[float]) -> list[float]:
    if not value:
        raise ValueError("needs at least one bucket boundary")
    if any(b <= 0 for b in value) or any(a >= b for a, b in zip(value, value[1:])):
        raise ValueError("bucket boundaries must be positive and strictly ascending")
    return value


class ObservabilitySettings(Strict):
    """Logs, metric histogram buckets and the /health window (prompts stay out of logs unless
    ``global.server.log_payloads``)."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # json: one JSON object per line (production); text: human-readable (local debugging).
    log_format: Literal["json", "text"] = "json"
    # End-to-end and per-model-call latency (s). Covers the SPEC §2 range: 80 ms .. 120 s.
    latency_buckets_s: list[float] = Field(
        default_factory=lambda: [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120])
    ttft_buckets_s: list[float] = Field(
        default_factory=lambda: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30])
    # Fusion stages (panel, judge analysis, synthesis).
    stage_buckets_s: list[float] = Field(
        default_factory=lambda: [0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120])
    # Signal extraction + decision selection.
    routing_buckets_s: list[float] = Field(
        default_factory=lambda: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5])
    # Rolling window of the per-model latency / success figures on /health.
    health_window_s: float = Field(300.0, gt=0)

    @field_validator("latency_buckets_s", "ttft_buckets_s", "stage_buckets_s", "routing_buckets_s")
    @classmethod
    def _buckets(cls, value: list[float]) -> list[float]:
        return _ascending_positive(value)


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
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)

    @model_validator(mode="after")
    def _auth_references(self) -> "HorizonConfig":
        """Key permissions must name real models and decisions: a typo would lock a client out."""
        known_models = {m.alias for m in self.models} | {u.alias for u in self.unavailable_models}
        # fusion_direct is the request-scoped decision a plugins override builds (SPEC §3).
        known_decisions = {d.name for d in self.routing.decisions} | {"fusion_direct"}
        for i, key in enumerate(self.auth.keys):
            for j, alias in enumerate(key.allowed_models or []):
                if alias not in known_models:
                    raise _PathError(f"auth.keys[{i}].allowed_models[{j}]", f"unknown model {alias!r}")
            for j, name in enumerate(key.allowed_decisions or []):
                if name not in known_decisions:
                    raise _PathError(f"auth.keys[{i}].allowed_decisions[{j}]",
                                     f"unknown decision {name!r}")
        return self

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
