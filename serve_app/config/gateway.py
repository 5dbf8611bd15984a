"""Settings of the gateway itself: routing slugs, the ingress server, image checks, simulation."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import Field, model_validator

from .base import ImageFormat, Strict

# A request ``model`` value that routes: no empty one (a client cannot send it: a 400) and no
# whitespace anywhere (a client's ``model`` is matched as sent, so " auto" would never match).
Slug = Annotated[str, Field(pattern=r"^\S+$")]


class RouterSettings(Strict):
    # Request ``model`` values that run full signal + decision evaluation.
    auto_model_names: list[Slug] = Field(default_factory=lambda: ["vllm-sr/auto", "auto", "MoM"])


class FusionSlugs(Strict):
    # Request ``model`` values that run Fusion-only decision evaluation.
    model_names: list[Slug] = Field(default_factory=lambda: ["vllm-sr/fusion"])
    # Most panel members one Fusion run may call (a decision's panel or a request's
    # ``analysis_models``): one request must not fan out to hundreds of model calls. A
    # request over it is a 400 naming ``plugins[i].analysis_models``; a decision over it
    # fails at load.
    max_panel_size: int = Field(8, ge=1)


class LooperSettings(Strict):
    fusion: FusionSlugs = Field(default_factory=FusionSlugs)


class IntegrationSettings(Strict):
    looper: LooperSettings = Field(default_factory=LooperSettings)


class ServerSettings(Strict):
    """Ingress HTTP behaviour."""

    max_request_body_bytes: int = Field(10 * 1024 * 1024, gt=0)
    # How deep a request body's objects and arrays may nest (a JSON Schema in tools or
    # response_format rarely goes past 20). Deeper bodies get a 400 before any model is called:
    # Ray cannot pickle a value nested ~500 deep, and that failure would count against the
    # model's breaker, so a few such requests would open it for every caller. 256 at most.
    max_json_depth: int = Field(64, ge=2, le=256)
    # Ingress deployment sizing; the ingress is stateless and scales like any deployment.
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(1, ge=1)
    max_ongoing_requests: int = Field(256, ge=1)
    # A redeploy starts new ingress replicas (this percentage, rounded up) before stopping old
    # ones, so HTTP is always served. The ingress asks Ray for no CPU, so the surge costs only
    # memory; 0 stops an old replica first (scaling.max_surge_percent of models explains).
    max_surge_percent: int = Field(100, ge=0, le=100)
    # Seconds a starting ingress replica waits for its routing to start before its constructor
    # returns, when Serve (and HAProxy) put it in rotation. A replica started beside running
    # ones (a redeploy, the ingress scaling out) then never answers "not ready" to requests
    # the others would have served; on a first start (the embedding model still loading) the
    # wait ends, and /health can say what routing waits for.
    routing_start_wait_s: float = Field(10.0, ge=0)
    # Log prompts/completions only when an operator explicitly allows it.
    log_payloads: bool = False
    # Seconds a client is told to wait on 429/503 responses.
    retry_after_s: int = Field(1, ge=0)
    # Largest ``n`` (choices per request) the gateway passes to an engine; more is a 400 naming
    # ``n`` (each choice costs a full generation).
    max_n: int = Field(8, ge=1)
    # The ingress process's garbage collector (serve_app.serving.process). Python's default
    # first-generation threshold (700) ran ~140 young collections a second at 700 requests/s,
    # ~8 % of the ingress's time; None keeps Python's default.
    gc_gen0_threshold: Optional[int] = Field(10_000, ge=100)
    # Move what the replica built at start (config, routing artefacts, Ray, pydantic) out of
    # the collector's reach once routing is ready, so full collections walk only new objects.
    gc_freeze_after_start: bool = True

    @model_validator(mode="after")
    def _replica_bounds(self) -> "ServerSettings":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        return self


class GlobalSettings(Strict):
    router: RouterSettings = Field(default_factory=RouterSettings)
    integrations: IntegrationSettings = Field(default_factory=IntegrationSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)


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


class SimulationSettings(Strict):
    # Multiplies every simulated model's latencies (1.0 = the SPEC §2 figures).
    latency_scale: float = Field(1.0, ge=0)
