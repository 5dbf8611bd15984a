"""Settings of one fleet member: engine, backend sections, placement, scaling, timeouts, sampling."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from .base import Backend, ModelRole, PathError, RayLabels, ResourceAmount, Strict, path_exists

# Relative data paths in a profile resolve from the working directory, then the project root.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def resolve_profile_path(path: str) -> Optional[Path]:
    """``path`` as a file that exists (working directory first, then the project root), or None."""
    candidate = Path(path)
    for base in ((Path(),) if candidate.is_absolute() else (Path.cwd(), PROJECT_ROOT)):
        full = base / candidate
        if path_exists(full, file=True):
            return full
    return None


class EngineSettings(Strict):
    """Engine settings shared by every backend kind.

    For ``vllm`` these map 1:1 onto vLLM engine arguments; ``engine_kwargs`` passes any other
    vLLM engine argument through unchanged. For ``simulated`` models ``max_model_len`` still
    bounds the context so context-length handling behaves as on the real fleet.
    """

    model: str = Field(..., min_length=1, description="HF model id or local path")
    served_model_name: Optional[str] = Field(None, min_length=1)
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    quantization: Optional[str] = None
    max_model_len: int = Field(4096, gt=0)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    # vLLM's ``--dtype`` words: another is an engine that fails to start, a minute in.
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = "auto"
    enforce_eager: bool = False
    max_num_seqs: Optional[int] = Field(None, ge=1)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    # Multimodal limits (vLLM ``limit_mm_per_prompt``), e.g. {"image": 4}.
    limit_mm_per_prompt: Optional[dict[str, int]] = None
    # Environment for the engine's worker processes (e.g. VLLM_CPU_KVCACHE_SPACE on CPU).
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _no_second_copy_in_engine_kwargs(self) -> "EngineSettings":
        # engine_kwargs is applied last, so such a key would win in vLLM while the placement,
        # the planner, the context checks and the tool routing read the profile's own setting.
        for key in self.engine_kwargs:
            setting = ENGINE_KWARGS_OWNED.get(key)
            if setting is not None:
                raise PathError(f"engine_kwargs.{key}", f"set it as {setting}: the gateway and the "
                                                        "planner read that setting, and vLLM gets it from there")
        return self


# vLLM arguments the profile has a setting of its own for (the engine's fields, the model's
# tool_calling and chat_template sections), by the setting that gives them.
ENGINE_KWARGS_OWNED: dict[str, str] = {
    **{name: f"engine.{name}" for name in (
        "model", "served_model_name", "tensor_parallel_size", "pipeline_parallel_size", "quantization",
        "max_model_len", "gpu_memory_utilization", "dtype", "enforce_eager", "max_num_seqs",
        "limit_mm_per_prompt")},
    "tool_call_parser": "tool_calling.parser",
    "tool_strict_level": "tool_calling.strict_level",
    "enable_auto_tool_choice": "tool_calling (a parser turns it on)",
    "chat_template": "chat_template.file",
    "default_chat_template_kwargs": "chat_template.kwargs",
    "chat_template_content_format": "chat_template.content_format",
}


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
    # /v1/embeddings hands a long input list to the batch queue this many texts at a time, so
    # the router's one-text calls arriving meanwhile join the next piece's batch instead of
    # waiting behind the whole list (2,048 long texts are seconds of forward passes).
    endpoint_chunk_texts: int = Field(64, ge=1)
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
    # Seconds a new replica takes before it serves, as a real engine loading its weights (not
    # multiplied by latency_scale): rollouts, scale-outs and cold starts then take time.
    load_s: float = Field(0.0, ge=0)


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
    resources: dict[str, ResourceAmount] = Field(default_factory=dict)
    # Ray node labels the replica must land on (label_selector).
    node_labels: RayLabels = Field(default_factory=dict)
    placement_group_strategy: Literal["PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"] = "PACK"
    memory_gb: Optional[float] = Field(None, gt=0)

    @field_validator("num_gpus")
    @classmethod
    def _whole_gpus_above_one(cls, value: float) -> float:
        # Ray only shares a GPU below 1.0; 1.5 GPUs cannot be scheduled.
        if value > 1 and value != int(value):
            raise ValueError(f"num_gpus {value}: fractions are only allowed below 1")
        return value


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
    # Ray Serve admission: requests a replica runs at once and the bounded queue in front. A
    # model deployment is given no more than its gateway line sends a replica (the engine's
    # slots by default; serve_app.autoscaling.options.scaling_options says why).
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
    # A redeploy that restarts this deployment (any change of the profile's args does) may start
    # this percentage of its replicas (rounded up) before stopping old ones, which keep serving
    # meanwhile. 0 (Ray Serve's default) stops an old replica first: a model with one replica
    # is down until its replacement has loaded. A surge needs that much spare capacity, or the
    # rollout waits forever (horizon validate checks a profile without a cluster section).
    max_surge_percent: int = Field(0, ge=0, le=100)

    @model_validator(mode="after")
    def _bounds(self) -> "ScalingSettings":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        if self.look_back_period_s <= self.metrics_interval_s:
            raise PathError("look_back_period_s",
                             f"{self.look_back_period_s} must exceed metrics_interval_s "
                             f"({self.metrics_interval_s}): the window needs more than one sample")
        if self.schedule and self.policy != "queue_depth":
            # Ray's built-in ongoing-requests policy knows nothing of time windows.
            raise PathError("schedule", "schedule windows need policy: queue_depth")
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


ToolStrictLevel = Literal["auto", "function", "parameter"]


class ToolCallingSettings(Strict):
    """Tool calling of one engine: how its output becomes OpenAI ``tool_calls``.

    A model without this section has no tool support: a request with ``tools`` (and a
    ``tool_choice`` other than ``none``) is refused before any model call, and ``horizon
    validate`` refuses a profile whose decisions would route such requests to it. For
    ``backend: vllm`` the fields are vLLM frontend arguments (``--tool-call-parser``,
    ``--tool-strict-level``; ``--enable-auto-tool-choice`` is always on, as vLLM loads no
    parser without it, not even for ``required``); ``parser`` is then required.
    A simulated model without the section honours tools like this default (arguments
    generated from the tool's schema): it stands in for an engine that has it.
    """

    # vLLM tool-call parser, e.g. hermes (Qwen2.5 family), deepseek_v3, k2_horizon, kimi_k2.
    parser: Optional[str] = Field(None, min_length=1)
    # vLLM --tool-strict-level: "parameter" pins every call's arguments to the tool's JSON
    # Schema through the grammar (as if every tool were strict); "function" constrains only the
    # call envelope; "auto" only what tool_choice and each tool's own ``strict`` demand.
    strict_level: ToolStrictLevel = "parameter"
    # Several calls in one answer (OpenAI parallel_tool_calls); false: at most one is asked for.
    parallel_calls: bool = True


class ChatTemplateSettings(Strict):
    """The chat template an engine renders conversations with (vLLM frontend arguments)."""

    # A Jinja file replacing the checkpoint's template (e.g. one that renders ``tools``);
    # relative to the working directory or the project root. Read when the deployment is
    # built, so replicas on other nodes need no copy of it.
    file: Optional[str] = Field(None, min_length=1)
    # Defaults for the template's keyword arguments (vLLM --default-chat-template-kwargs);
    # a request's own chat_template_kwargs win.
    kwargs: dict[str, Any] = Field(default_factory=dict)
    # How message content reaches the template: "string" joins text parts into one string
    # (templates that concatenate content), "openai" keeps the parts list, "auto" detects.
    content_format: Literal["auto", "string", "openai"] = "auto"

    @field_validator("file")
    @classmethod
    def _file_exists(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and resolve_profile_path(value) is None:
            raise ValueError(f"chat template file {value!r} not found (looked in {Path.cwd()} "
                             f"and {PROJECT_ROOT})")
        return value


class SamplingDefaults(Strict):
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    max_tokens: Optional[int] = Field(None, ge=1)


class FusionJudgeSettings(Strict):
    """How this model's calls run when it judges a Fusion panel (the model's default; a Fusion
    decision or a request's plugin sets its own above it)."""

    # frequency_penalty of the separate-mode analysis call only (the answer keeps the client's
    # sampling). A small judge, greedy or at a low temperature, can repeat one token pair
    # inside its JSON strings until the token limit, so its analysis never closes.
    analysis_frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)


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
    fusion_judge: FusionJudgeSettings = Field(default_factory=FusionJudgeSettings)
    # Serve this alias with another alias's deployment instead of starting an engine of its
    # own (the CPU profile runs one tiny engine for all text roles). Its own engine section
    # still describes the model for planning and context limits.
    shares_engine_with: Optional[str] = None
    # Tool calling and the chat template are the engine's: an alias sharing another's engine
    # has the owner's (declaring its own is an error). A simulated stand-in keeps them as a
    # description of the engine it replaces (it renders no template).
    tool_calling: Optional[ToolCallingSettings] = None
    chat_template: Optional[ChatTemplateSettings] = None

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
        if self.embedding is not None and self.embedding.max_length > self.engine.max_model_len:
            # Inputs up to max_length pass the endpoint's check; past the model's positions
            # they would fail inside the model (a 5xx) instead of the 400 the check gives.
            raise PathError("embedding.max_length", f"{self.embedding.max_length} is more than the model "
                                                    f"reads (engine.max_model_len {self.engine.max_model_len})")
        if self.backend == "embedding" and self.engine.engine_kwargs:
            # They are vLLM's arguments: the FlagEmbedding deployment would ignore them.
            raise PathError("engine.engine_kwargs", "an embedding model takes no vLLM arguments; "
                                                    "its settings are under embedding")
        for key in ("tool_calling", "chat_template"):
            if getattr(self, key) is None:
                continue
            if self.backend == "embedding":
                raise PathError(key, "an embedding model has no chat engine")
            if self.shares_engine_with is not None:
                raise PathError(key, f"this model shares {self.shares_engine_with!r}'s engine; "
                                     f"declare {key} on {self.shares_engine_with!r}")
        if self.backend == "vllm" and self.tool_calling is not None and not self.tool_calling.parser:
            raise PathError("tool_calling.parser", "a vLLM engine needs a tool-call parser to "
                                                   "return tool calls (e.g. hermes)")
        return self


class UnavailableModel(Strict):
    """A fleet alias this profile does not serve: requests to it get a clear error."""

    alias: str
    role: ModelRole
    reason: str
