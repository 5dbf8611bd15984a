"""Pydantic schema of a K2 Horizon profile.

A profile is one YAML file under ``configs/``. It is a Ray Serve config file whose single
application's ``args`` hold the Horizon settings validated here, so ``serve run configs/X.yaml``
and ``horizon`` commands read the very same file. Every model here forbids unknown keys: an
operator's typo must fail at load with the path of the key, never be silently ignored.

Key names follow vLLM Semantic Router where the concepts overlap (``global.router``,
``routing.decisions[]`` with ``rules``/``modelRefs``/``algorithm``).

This module imports nothing else of the project but its own small settings module
(``intent_head.py``, which imports nothing): everyone imports it.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .intent_head import IntentHeadSettings

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
    # One forward pass covers at most this many (padded) tokens: a batch is sorted by length
    # and cut into passes, so a 300-token text never pads thirty 15-token ones to its length.
    max_tokens_per_pass: int = Field(2048, ge=1)
    # CPU only: ``dynamic_int8`` quantises the encoder's Linear layers with PyTorch's dynamic
    # quantisation (int8 weights, activations quantised per batch). The packaged MiniLM's
    # forward pass is ~2x faster on AVX2 cores; routing accuracy over the 605 labelled items
    # moved by half a point (docs/benchmarks.md, Routing); thresholds stay on the same scale.
    quantization: Literal["none", "dynamic_int8"] = "none"

    @model_validator(mode="after")
    def _quantization_fits_the_model(self) -> "EmbeddingSettings":
        if self.quantization != "none" and (self.model_class != "flag" or self.use_fp16):
            raise ValueError("quantization: dynamic_int8 is for CPU models (model_class: flag, "
                             "use_fp16: false)")
        return self


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
    """Ray placement of one replica.

    ``num_cpus`` / ``num_gpus`` / ``resources`` are per engine worker: a model with
    ``tensor_parallel_size x pipeline_parallel_size`` workers reserves that many placement-group
    bundles of this shape (k2: 8 x {GPU: 1}), and a single-worker model reserves one. Node pinning
    is by ``node_labels`` (Ray label selectors) and/or custom ``resources`` that only the target
    node type offers (``ray.serve.llm`` placement groups accept resources, not label selectors).
    """

    num_cpus: float = Field(1.0, ge=0)
    # Fractional values let several deployments share one GPU (node C of the fleet).
    num_gpus: float = Field(0.0, ge=0)
    accelerator_type: Optional[str] = None
    resources: dict[str, float] = Field(default_factory=dict)
    # Ray node labels the replica must land on (label_selector).
    node_labels: dict[str, str] = Field(default_factory=dict)
    placement_group_strategy: Literal["PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"] = "PACK"
    memory_gb: Optional[float] = Field(None, gt=0)

    @field_validator("num_gpus")
    @classmethod
    def _whole_gpus_above_one(cls, value: float) -> float:
        # Ray only shares a GPU below 1.0; 1.5 GPUs cannot be scheduled.
        if value > 1 and value != int(value):
            raise ValueError(f"num_gpus {value}: fractions are only allowed below 1")
        return value


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
    labels: dict[str, str] = Field(default_factory=dict)
    resources: dict[str, float] = Field(default_factory=dict)
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

    name: str = Field("k2-horizon", pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    ray_version: str = "2.60.0"
    # Container image with this project, Ray and vLLM installed (KubeRay pods).
    image: str = "k2-horizon:latest"
    namespace: str = "default"
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


ImageFormat = Literal["png", "jpeg", "webp", "gif"]


class VisionSettings(Strict):
    """Checks on OpenAI ``image_url`` parts, run before any model call (SPEC §6, seed §5.1)."""

    allowed_formats: list[ImageFormat] = Field(
        default_factory=lambda: ["png", "jpeg", "webp", "gif"], min_length=1)
    # 6 MiB decoded is 8 MiB of base64: inside the default 10 MiB request body limit.
    max_decoded_bytes: int = Field(6 * 1024 * 1024, gt=0)
    max_width: int = Field(4096, ge=1)
    max_height: int = Field(4096, ge=1)
    min_width: int = Field(16, ge=1)
    min_height: int = Field(16, ge=1)
    max_images_per_request: int = Field(4, ge=1)
    # http(s) image URLs make the engine fetch from the network; off unless an operator allows it.
    allow_remote_urls: bool = False

    @model_validator(mode="after")
    def _dimension_bounds(self) -> "VisionSettings":
        if self.min_width > self.max_width or self.min_height > self.max_height:
            raise ValueError("min_width/min_height must not exceed max_width/max_height")
        return self


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
    # Window over which Ray Serve averages the ongoing/queued request counts it hands a policy;
    # shorter reacts faster to a step in load, longer ignores bursts. Must exceed the interval.
    look_back_period_s: float = Field(10.0, gt=0)
    # Idle seconds before the last replica of a cold model (min_replicas 0) is released;
    # None = downscale_delay_s. Reloading an engine costs minutes, so this is usually longer.
    scale_to_zero_delay_s: Optional[float] = Field(None, ge=0)
    # Sequences one replica decodes at once (queue_depth policy). None = the engine's own
    # max_num_seqs (simulated / engine section), bounded by max_ongoing_requests.
    replica_slots: Optional[int] = Field(None, ge=1)
    schedule: list[ScheduleWindow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bounds(self) -> "ScalingSettings":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        if self.look_back_period_s <= self.metrics_interval_s:
            raise _PathError("look_back_period_s",
                             f"{self.look_back_period_s} must exceed metrics_interval_s "
                             f"({self.metrics_interval_s}): the window needs more than one sample")
        if self.schedule and self.policy != "queue_depth":
            # Ray's built-in ongoing-requests policy knows nothing of time windows.
            raise _PathError("schedule", "schedule windows need policy: queue_depth")
        if self.initial_replicas is not None and not (
            self.min_replicas <= self.initial_replicas <= self.max_replicas
        ):
            raise ValueError("initial_replicas must lie within [min_replicas, max_replicas]")
        return self

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas > self.min_replicas or bool(self.schedule)


class TimeoutSettings(Strict):
    """Per-model deadlines (SPEC §6: k2 120 s, text 60 s, vision 30 s).

    Both are measured from the moment the model call starts (after the ingress admission
    queue, whose wait is bounded separately by ``resilience.admission.*.max_wait_s``) and are
    multiplied by ``resilience.timeout_scale``. ``first_token_s`` applies to streams only: a
    non-streaming completion shows no first token, so only ``total_s`` bounds it.
    """

    first_token_s: float = Field(60.0, gt=0)
    total_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _first_token_within_total(self) -> "TimeoutSettings":
        if self.first_token_s > self.total_s:
            raise ValueError(f"first_token_s ({self.first_token_s}) > total_s ({self.total_s})")
        return self


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


# Signal settings (``routing.signals``). Each signal type below is one module under
# serve_app/routing/signals/; the names a decision condition may use per type are fixed here so
# a typo in a rule fails at load with its path instead of silently never matching.


class IntentClassifierSettings(Strict):
    """The LLM asked for ``{"task_type": ...}`` when the best template score is below threshold."""

    enabled: bool = True
    # Fleet alias of the classifier (k2 on the fleet).
    model: str = "k2"
    prompt_file: str = "configs/intents/classifier_prompt.txt"
    max_tokens: int = Field(32, ge=1)
    timeout_s: float = Field(10.0, gt=0)
    # One call plus one retry (SPEC §7: "then one retry").
    attempts: int = Field(2, ge=1)
    # Confidence reported for a classifier answer that carries none of its own.
    default_confidence: float = Field(0.8, ge=0, le=1)


class IntentSignalSettings(Strict):
    """Intent by cosine similarity against exemplar sentences (configs/intents/*.yaml)."""

    # Template files, or directories whose *.yaml files are read (relative paths: the working
    # directory first, then the project root).
    template_files: list[str] = Field(default_factory=lambda: ["configs/intents"], min_length=1)
    # Threshold per embedding model, keyed by the embedding model's engine.model; scores are on
    # that model's cosine scale, so one number cannot serve two models.
    thresholds: dict[str, float] = Field(default_factory=lambda: {"BAAI/bge-m3": 0.78})
    default_threshold: float = Field(0.78, ge=-1, le=1)
    # max: best single template; top_k_mean: mean of an intent's k best templates (steadier).
    aggregation: Literal["max", "top_k_mean"] = "top_k_mean"
    top_k: int = Field(3, ge=1)
    # Hubness correction when picking the best intent: a template close to many other
    # templates (a generic "What is ...?") is close to many requests too, and small embedders
    # over-pick its intent. Each template's similarity is lowered by penalty x its mean
    # similarity to its ``hubness_neighbours`` nearest templates. The threshold still applies
    # to the plain cosine score of the chosen intent. 0 disables it.
    hubness_penalty: float = Field(0.0, ge=0, le=2)
    hubness_neighbours: int = Field(10, ge=1)
    # Stricter bar for intents whose mistakes are costly (safety refuses the request): an
    # intent the embedding picks with a cosine under its own minimum escalates to the
    # classifier like a score under the threshold. Same scale as the threshold.
    min_scores: dict[TaskType, float] = Field(default_factory=dict)
    # Only this much of a long prompt is embedded (head and tail halves); other signals still
    # see the full text.
    max_embed_chars: int = Field(2000, ge=20)
    template_batch_size: int = Field(64, ge=1)
    classifier: IntentClassifierSettings = Field(default_factory=IntentClassifierSettings)
    # A trained classifier head on the embedding (serve_app/config/intent_head.py); without it
    # the top-k template cosine above decides.
    head: Optional[IntentHeadSettings] = None

    @field_validator("thresholds")
    @classmethod
    def _threshold_range(cls, value: dict[str, float]) -> dict[str, float]:
        for model, threshold in value.items():
            if not -1 <= threshold <= 1:
                raise _PathError(model, f"threshold {threshold} outside the cosine range [-1, 1]")
        return value

    def threshold_for(self, embedding_model: Optional[str]) -> float:
        if embedding_model is None:
            return self.default_threshold
        return self.thresholds.get(embedding_model, self.default_threshold)


class KeywordRule(Strict):
    """One named keyword signal: any whole-word keyword or any regex matches."""

    keywords: list[str] = Field(default_factory=list)
    regex: list[str] = Field(default_factory=list)
    case_sensitive: bool = False

    @model_validator(mode="after")
    def _compiles(self) -> "KeywordRule":
        import re

        if not self.keywords and not self.regex:
            raise ValueError("a keyword rule needs keywords or regex")
        for i, pattern in enumerate(self.regex):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _PathError(f"regex[{i}]", f"invalid regular expression: {exc}") from None
        return self


class CodeFeatureSettings(Strict):
    """Code features: a fenced block, or enough language-syntax pattern hits."""

    syntax_patterns: list[str] = Field(default_factory=lambda: [
        r"\bdef\s+\w+\s*\(", r"\bclass\s+\w+\s*[:({]", r"#include\s*<", r"\bfunction\s+\w*\s*\(",
        r"=>", r"\bimport\s+[\w.]+", r"\bSELECT\b[\s\S]+\bFROM\b", r"\bpublic\s+static\b",
        r"\breturn\b[^.!?]*;", r"\w+\([^()]*\)\s*\{", r"console\.log\(", r"\bfn\s+\w+\s*\(",
        r"Traceback \(most recent call last\)", r"\b(?:const|let|var)\s+\w+\s*=",
    ])
    min_syntax_hits: int = Field(2, ge=1)

    @field_validator("syntax_patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        import re

        for i, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _PathError(f"[{i}]", f"invalid regular expression: {exc}") from None
        return value


class ShortTextSettings(Strict):
    """SPEC §4 incident rule: under ``max_chars`` with no code or image features -> chat."""

    max_chars: int = Field(20, ge=0)


class ContextBucket(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    min_tokens: int = Field(0, ge=0)
    # Exclusive upper bound; None = no upper bound.
    max_tokens: Optional[int] = Field(None, gt=0)


class ContextLengthSettings(Strict):
    """Token estimate of the whole conversation, reported as one named bucket."""

    chars_per_token: float = Field(4.0, gt=0)
    buckets: list[ContextBucket] = Field(default_factory=lambda: [
        ContextBucket(name="short", max_tokens=2000),
        ContextBucket(name="medium", min_tokens=2000, max_tokens=16000),
        ContextBucket(name="long", min_tokens=16000),
    ], min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> "ContextLengthSettings":
        names = [b.name for b in self.buckets]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate bucket names in {names}")
        for i, b in enumerate(self.buckets):
            if b.max_tokens is not None and b.max_tokens <= b.min_tokens:
                raise _PathError(f"buckets[{i}].max_tokens", "must be greater than min_tokens")
        return self


class LanguageSettings(Strict):
    """Script-based language signal (no model): dominant script -> language code."""

    # A second script with at least this share of the letters also emits ``mixed``.
    mixed_min_share: float = Field(0.2, gt=0, le=0.5)
    # Latin text counts as English when this share of its words are common English words.
    english_min_stopword_share: float = Field(0.15, ge=0, le=1)


class SignalSettings(Strict):
    intent: IntentSignalSettings = Field(default_factory=IntentSignalSettings)
    keywords: dict[str, KeywordRule] = Field(default_factory=dict)
    code: CodeFeatureSettings = Field(default_factory=CodeFeatureSettings)
    short_text: ShortTextSettings = Field(default_factory=ShortTextSettings)
    context_length: ContextLengthSettings = Field(default_factory=ContextLengthSettings)
    language: LanguageSettings = Field(default_factory=LanguageSettings)

    def condition_names(self, signal_type: str) -> Optional[set[str]]:
        """Names a condition of ``signal_type`` may use; None = any name (free-form)."""
        fixed = {
            "intent": set(TASK_TYPES),
            "keyword": set(self.keywords),
            "code": {"fenced", "syntax", "any"},
            "modality": {"image", "image_only", "text"},
            "short_text": {"short"},
            "context_length": {b.name for b in self.context_length.buckets},
        }
        if signal_type == "language":
            return None
        return fixed.get(signal_type, set())


# Every signal type a condition may reference.
SIGNAL_TYPES: tuple[str, ...] = ("intent", "keyword", "code", "modality", "short_text",
                                 "context_length", "language")


class Condition(Strict):
    """Leaf of a rule tree: the named match of one signal type, e.g. {type: intent, name: code}."""

    type: Literal["intent", "keyword", "code", "modality", "short_text", "context_length", "language"]
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
    """Sampling of one panel member (SPEC §5 ``analysis_overrides``), keyed by ``model``."""

    model: str = Field(..., min_length=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    max_completion_tokens: Optional[int] = Field(None, ge=1)


class GroundingSettings(Strict):
    """Agreement scoring of panel answers before the judge (Fusion ``grounding``).

    Scores come from the embedding deployment: each answer's cosine agreement with the other
    answers (``panel``), with the request's context messages (``context``), or a blend of both
    when context is present (``hybrid``). It measures agreement, not truth.
    """

    enabled: bool = False
    reference: Literal["hybrid", "context", "panel"] = "hybrid"
    # weight: keep all and ask the judge to weight by score; annotate: keep all, show scores;
    # filter: drop answers under min_score but always keep the min_keep best.
    policy: Literal["weight", "annotate", "filter"] = "weight"
    min_score: float = Field(0.0, ge=0, le=1)
    min_keep: int = Field(1, ge=1)
    # Share of the context agreement in a hybrid score when the request carries context.
    context_weight: float = Field(0.5, ge=0, le=1)
    # skip: an unavailable embedder falls back to plain Fusion; fail: the request fails.
    on_error: Literal["skip", "fail"] = "skip"


class FusionParams(Strict):
    """Every Fusion parameter of SPEC §5; None means "use the documented default"."""

    model: Optional[str] = None
    analysis_models: Optional[list[str]] = Field(None, min_length=1)
    analysis_mode: Literal["separate", "one_call", "none"] = "separate"
    analysis_overrides: list[AnalysisOverride] = Field(default_factory=list)
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
    judge_prompt_version: str = Field("fusion-v1", min_length=1)
    grounding: GroundingSettings = Field(default_factory=GroundingSettings)

    @field_validator("analysis_overrides", mode="before")
    @classmethod
    def _override_forms(cls, value: Any) -> Any:
        # The seed's list form is canonical; the mapping {model: {temperature: ...}} is shorter.
        if isinstance(value, dict):
            return [{"model": name, **spec} if isinstance(spec, dict) else spec
                    for name, spec in value.items()]
        return value

    def effective_panel(self, model_refs: list[str]) -> list[str]:
        """``analysis_models`` when set, else the decision's modelRefs (SPEC §5 default)."""
        return list(self.analysis_models) if self.analysis_models else list(model_refs)

    def override_for(self, model: str) -> Optional[AnalysisOverride]:
        return next((o for o in self.analysis_overrides if o.model == model), None)

    def rule_violations(self, panel: list[str]) -> list[tuple[str, str]]:
        """Cross-field rules for an effective ``panel``, as (sub-path, message) pairs.

        Shared by the load-time check (Decision._fusion_rules) and the per-request override
        check of the Fusion policy, so both reject exactly the same combinations.
        """
        problems: list[tuple[str, str]] = []
        if self.min_successful_responses is not None and self.min_successful_responses > len(panel):
            problems.append(("min_successful_responses",
                             f"{self.min_successful_responses} exceeds the effective panel size "
                             f"{len(panel)} ({', '.join(panel)}); quorums are never lowered automatically"))
        if self.analysis_template and self.analysis_template.strip() and self.analysis_mode != "separate":
            problems.append(("analysis_template",
                             f"a non-empty analysis_template is only used by analysis_mode: separate "
                             f"(this decision uses {self.analysis_mode!r})"))
        seen: set[str] = set()
        for i, override in enumerate(self.analysis_overrides):
            if override.model not in panel:
                problems.append((f"analysis_overrides[{i}].model",
                                 f"{override.model!r} is not on the panel ({', '.join(panel)})"))
            elif override.model in seen:
                problems.append((f"analysis_overrides[{i}].model",
                                 f"duplicate override for {override.model!r}"))
            seen.add(override.model)
        return problems


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
    # Task type of requests this decision takes (fallback chain, queue priority, session bucket,
    # sampling); None = the intent the signals found, else "unknown".
    task_type: Optional[TaskType] = None
    # Key of routing.sampling_matrix to use instead of the task type (e.g. "creative").
    sampling_class: Optional[str] = None

    def rule_conditions(self) -> list["Condition"]:
        """Every leaf condition of this decision's rule tree."""
        out: list[Condition] = []
        stack: list[Union[RuleNode, Condition]] = [self.rules] if self.rules else []
        while stack:
            node = stack.pop()
            if isinstance(node, Condition):
                out.append(node)
            else:
                stack.extend(node.conditions)
        return out

    @model_validator(mode="after")
    def _fusion_rules(self) -> "Decision":
        params = self.algorithm.fusion
        if params is not None:
            panel = params.effective_panel([ref.model for ref in self.model_refs])
            for sub_path, message in params.rule_violations(panel):
                raise _PathError(f"algorithm.fusion.{sub_path}", message)
        return self


class RoutingSettings(Strict):
    decisions: list[Decision] = Field(..., min_length=1)
    default_decision: str
    # Temperature by task type when a request sets none (SPEC §7 sampling matrix).
    sampling_matrix: dict[str, float] = Field(default_factory=dict)
    # Per-signal settings owned by the routing package (thresholds, template files, ...).
    signals: SignalSettings = Field(default_factory=SignalSettings)

    @model_validator(mode="after")
    def _names(self) -> "RoutingSettings":
        names = [d.name for d in self.decisions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate decision names: {dupes}")
        if self.default_decision not in names:
            raise ValueError(f"default_decision {self.default_decision!r} is not a decision name")
        return self

    @model_validator(mode="after")
    def _condition_names(self) -> "RoutingSettings":
        # A condition naming a keyword list or bucket that does not exist would never match.
        for i, decision in enumerate(self.decisions):
            for cond in decision.rule_conditions():
                allowed = self.signals.condition_names(cond.type)
                if allowed is not None and cond.name not in allowed:
                    raise _PathError(f"decisions[{i}].rules",
                                     f"condition {cond.type}:{cond.name} names nothing; "
                                     f"{cond.type} names are {sorted(allowed)}")
            if decision.sampling_class is not None and decision.sampling_class not in self.sampling_matrix:
                raise _PathError(f"decisions[{i}].sampling_class",
                                 f"{decision.sampling_class!r} is not a key of sampling_matrix")
        return self


# --------------------------------------------------------------------------- resilience


class BreakerSettings(Strict):
    """Circuit breaker of each model (SPEC §6: 5 consecutive failures within 30 s open it, a
    probe every 10 s, gradual recovery). Not too sensitive: the seed's breaker that tripped on
    every wobble pushed all traffic onto the backup path and took K2 down."""

    failure_threshold: int = Field(5, ge=1, description="consecutive failures that open it")
    window_s: float = Field(30.0, gt=0, description="the failures must fall within this window")
    probe_interval_s: float = Field(10.0, gt=0, description="open -> half-open after this long")
    # Trial requests in flight (per ingress replica) at the first half-open step; step k
    # admits k+1 times as many.
    half_open_max_inflight: int = Field(1, ge=1)
    # Successful trials needed, each admitting more traffic, before fully closed.
    recovery_steps: int = Field(3, ge=1)
    # Shared (Ray actor) store: how often a replica pushes its outcomes and pulls the shared
    # state. The breaker state a replica acts on is at most this stale.
    sync_interval_s: float = Field(0.25, gt=0)


class AdmissionSettings(Strict):
    """The ingress-side bounded priority queue in front of one model engine."""

    # Requests this ingress replica sends to the engine at once; None = the model's
    # scaling.max_ongoing_requests. With several ingress replicas divide the engine's
    # concurrency among them: priority only works while the queue is held here.
    capacity: Optional[int] = Field(None, ge=1)
    max_queue_size: int = Field(64, ge=0, description="waiting requests; beyond -> 429")
    # A request waiting longer than this leaves the queue with 429 (None = no bound).
    max_wait_s: Optional[float] = Field(None, gt=0)
    # Seed for the service-time estimate before any request has completed (seconds).
    service_time_hint_s: Optional[float] = Field(None, gt=0)


class RetryAfterSettings(Strict):
    """Bounds of the Retry-After hint sent with 429/503 (the hint is the estimated wait)."""

    min_s: float = Field(1.0, ge=0)
    max_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> "RetryAfterSettings":
        if self.min_s > self.max_s:
            raise ValueError(f"min_s ({self.min_s}) > max_s ({self.max_s})")
        return self


class DegradeRule(Strict):
    """Health-aware degradation: while ``model``'s estimated queue wait exceeds the bound,
    ``share`` of the matching traffic goes to ``target`` instead (recorded as a hop)."""

    model: str
    max_queue_wait_s: float = Field(..., gt=0)
    target: str
    share: float = Field(0.5, ge=0, le=1)
    # Task types the rule applies to; empty = every task type sent to ``model``.
    task_types: list[str] = Field(default_factory=list)

    @field_validator("task_types")
    @classmethod
    def _known_tasks(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"unknown task types {unknown}; expected one of {list(TASK_TYPES)}")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> "DegradeRule":
        if self.model == self.target:
            raise ValueError("target must differ from model")
        return self


class ResilienceSettings(Strict):
    fallback_chains: dict[str, list[str]] = Field(default_factory=dict)
    # Models called after the first one (0 = no fallback). Never recursion: the seed's
    # unbounded chain once cascaded through three models for tens of seconds.
    max_fallback_depth: int = Field(1, ge=0)
    # Task types whose failure returns this message instead of falling back (vision).
    no_fallback_messages: dict[str, str] = Field(default_factory=dict)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    # Queue priority class per task type; lower number is served first.
    priorities: dict[str, int] = Field(default_factory=dict)
    default_priority: int = 5
    # A waiting request gains one priority class per this many seconds waited, so a steady
    # stream of high-priority work cannot starve the rest forever (None = no aging).
    priority_aging_s: Optional[float] = Field(None, gt=0)
    # Admission queue settings: ``default`` for every model, ``models`` per alias overrides it.
    admission_default: AdmissionSettings = Field(default_factory=AdmissionSettings)
    admission: dict[str, AdmissionSettings] = Field(default_factory=dict)
    retry_after: RetryAfterSettings = Field(default_factory=RetryAfterSettings)
    # Multiplies every model's timeouts (a profile running simulated engines faster).
    timeout_scale: float = Field(1.0, gt=0)
    degrade: list[DegradeRule] = Field(default_factory=list)
    # Calls per model behind the success rate and latency percentiles on /health.
    health_window: int = Field(200, ge=1)
    # A prompt too long for the target model's engine.max_model_len moves to the first model of
    # the task type's fallback chain whose context fits (serve_app.context_length); off = 400
    # context_length_exceeded straight away.
    context_fallback: bool = True

    @field_validator("fallback_chains", "priorities", "no_fallback_messages")
    @classmethod
    def _task_keys(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"unknown task types {unknown}; expected one of {list(TASK_TYPES)}")
        return value

    def admission_for(self, alias: str) -> AdmissionSettings:
        return self.admission.get(alias, self.admission_default)

    def priority_of(self, task_type: Optional[str]) -> int:
        if task_type is None:
            return self.default_priority
        return self.priorities.get(task_type, self.default_priority)


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
    redis_timeout_s: float = Field(0.5, gt=0)
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
    # Where the per-key token buckets live. ``inprocess``: in each ingress replica, so N
    # replicas admit up to N times a key's rate; ``redis``: one bucket per key shared by every
    # replica (falls back to the replica's own bucket while Redis is unreachable).
    rate_limit_store: Literal["inprocess", "redis"] = "inprocess"
    # None = ``sessions.redis_url`` (filled in at load): one Redis usually serves both.
    redis_url: Optional[str] = Field(None, pattern=r"^(redis|rediss|unix)://\S+$")
    # Every bucket is the hash ``{redis_key_prefix}{key name}``.
    redis_key_prefix: str = Field("horizon:ratelimit:", min_length=1)
    # Per-command deadline. The check runs before every limited request, so an unreachable
    # Redis must cost milliseconds; the request is then limited by the local bucket instead.
    redis_timeout_s: float = Field(0.25, gt=0)

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
    """Log format and metric histogram buckets (prompts stay out of logs unless
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
    # The GPU cluster (node types) a production profile is placed on; None on CPU profiles.
    cluster: Optional[ClusterSettings] = None
    vision: VisionSettings = Field(default_factory=VisionSettings)

    @model_validator(mode="after")
    def _vision_limit_within_engine(self) -> "HorizonConfig":
        """An image count the ingress admits must not be one the vision engine then rejects."""
        for i, m in enumerate(self.models):
            limit = (m.engine.limit_mm_per_prompt or {}).get("image")
            if m.role == "vision" and limit is not None and self.vision.max_images_per_request > limit:
                raise _PathError("vision.max_images_per_request",
                                 f"{self.vision.max_images_per_request} exceeds models[{i}] ({m.alias}) "
                                 f"engine.limit_mm_per_prompt.image = {limit}")
        return self

    @model_validator(mode="after")
    def _auth_redis_url_defaults_to_sessions(self) -> "HorizonConfig":
        if self.auth.redis_url is None:
            self.auth.redis_url = self.sessions.redis_url
        return self

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
        classifier = self.routing.signals.intent.classifier
        if classifier.enabled and classifier.model not in known:
            raise _PathError("routing.signals.intent.classifier.model", f"unknown model {classifier.model!r}")
        for task, chain in self.resilience.fallback_chains.items():
            for j, alias in enumerate(chain):
                if alias not in known:
                    raise _PathError(f"resilience.fallback_chains.{task}[{j}]", f"unknown model {alias!r}")
        for alias in self.resilience.admission:
            if alias not in known:
                raise _PathError(f"resilience.admission.{alias}", f"unknown model {alias!r}")
        for i, rule in enumerate(self.resilience.degrade):
            for key in ("model", "target"):
                if getattr(rule, key) not in known:
                    raise _PathError(f"resilience.degrade[{i}].{key}",
                                     f"unknown model {getattr(rule, key)!r}")
        return self

    @model_validator(mode="after")
    def _fusion_slugs(self) -> "HorizonConfig":
        """Fusion judges and panels name served fleet models, never a routing slug."""
        slugs = set(self.fusion_slugs) | set(self.auto_slugs)
        known = {m.alias for m in self.models} | {u.alias for u in self.unavailable_models}
        embedders = {m.alias for m in self.models if m.role == "embedding"}
        for i, d in enumerate(self.routing.decisions):
            params = d.algorithm.fusion
            if params is None:
                continue
            base = f"routing.decisions[{i}].algorithm.fusion"
            named = [("model", params.model)] if params.model is not None else []
            named += [(f"analysis_models[{j}]", m) for j, m in enumerate(params.analysis_models or [])]
            for key, alias in named:
                if alias in slugs:
                    raise _PathError(f"{base}.{key}",
                                     f"{alias!r} is a routing slug; a Fusion slug can never be a "
                                     "judge or panel model (no recursive Fusion)")
                if alias not in known:
                    raise _PathError(f"{base}.{key}", f"unknown model {alias!r}")
                if alias in embedders:
                    raise _PathError(f"{base}.{key}", f"{alias!r} is an embedding model, not a chat model")
            if params.grounding.enabled and not embedders:
                raise _PathError(f"{base}.grounding.enabled",
                                 "grounding needs an embedding model (backend: embedding) in models")
        return self


class _PathError(ValueError):
    """A cross-reference error that knows the exact path of the offending key."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message
