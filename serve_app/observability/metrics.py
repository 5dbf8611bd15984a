"""Every Prometheus metric Horizon exports, defined once, recorded through plain functions.

Metrics go through ``ray.serve.metrics`` so each replica's series reach the Ray metrics agent
(and Prometheus) with the ``deployment`` / ``replica`` / ``application`` tags Ray Serve adds.
Ray exports each name with a ``ray_`` prefix; a counter is exported as ``<name>_total`` (plus a
gauge copy under the bare name that Ray keeps for compatibility), a histogram as ``_bucket`` /
``_sum`` / ``_count``. :func:`exported_series` gives those names; the Grafana dashboard test
checks every queried series against them.

Metric objects are created lazily on first use: they must be built inside the process (a Ray
worker / Serve replica) that records them, never at import time or in the driver. Callers use
the ``record_*`` / ``set_*`` functions below and never touch metric objects. A failure to record
a metric is logged once per metric and never propagates into a request.

Counters are summed in the process and recorded once per ``counter_flush_interval_s`` by a
background thread (and at exit): a request adds to four counters, and each Ray record costs tens
of microseconds on the request path. Gauges and histograms are recorded at once.

Tests swap the backend with ``configure_metrics(factory=RecordingMetrics())`` (see
:mod:`serve_app.observability.recording`); :func:`flush_metrics` hands pending counts over.
"""

from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Optional, Protocol

from ..config.observability import ObservabilitySettings

log = logging.getLogger(__name__)

MetricKind = Literal["counter", "gauge", "histogram"]

# Ray Serve adds these tags itself; our own tag keys must not collide with them.
RAY_SERVE_TAG_KEYS: frozenset[str] = frozenset({"deployment", "replica", "application", "route"})


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: MetricKind
    description: str
    tag_keys: tuple[str, ...]
    # Field of ObservabilitySettings holding a histogram's bucket boundaries.
    buckets_setting: Optional[str] = None

    def exported_series(self) -> tuple[str, ...]:
        """The Prometheus series names Ray exports for this metric."""
        base = f"ray_{self.name}"
        if self.kind == "counter":
            return (f"{base}_total", base)
        if self.kind == "histogram":
            return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
        return (base,)


# A counter increment: the counter, its tag values in ``tag_keys`` order, the amount.
CounterIncrement = tuple[MetricSpec, tuple[str, ...], float]


# --------------------------------------------------------------------------- the metrics

REQUESTS = MetricSpec(
    "horizon_requests", "counter",
    "Client requests answered, by routing decision, serving model and HTTP status.",
    ("decision", "model", "status"))
REQUEST_LATENCY = MetricSpec(
    "horizon_request_latency_seconds", "histogram",
    "End-to-end latency of client requests (ingress in to last byte out).",
    ("decision", "model"), "latency_buckets_s")
TIME_TO_FIRST_TOKEN = MetricSpec(
    "horizon_time_to_first_token_seconds", "histogram",
    "Time from request arrival to the first streamed token.",
    ("decision", "model"), "ttft_buckets_s")
PROMPT_TOKENS = MetricSpec(
    "horizon_prompt_tokens", "counter", "Prompt (input) tokens of answered requests.",
    ("decision", "model"))
COMPLETION_TOKENS = MetricSpec(
    "horizon_completion_tokens", "counter", "Completion (output) tokens of answered requests.",
    ("decision", "model"))
MODEL_CALLS = MetricSpec(
    "horizon_model_calls", "counter",
    "Calls to one model deployment (direct, fallback hop, Fusion panel/judge, classifier), by outcome.",
    ("model", "status"))
MODEL_CALL_LATENCY = MetricSpec(
    "horizon_model_call_latency_seconds", "histogram", "Latency of one call to a model deployment.",
    ("model",), "latency_buckets_s")
FALLBACKS = MetricSpec(
    "horizon_fallbacks", "counter", "Fallback hops from a failed model to the next in its chain.",
    ("task_type", "from_model", "to_model"))
BREAKER_STATE = MetricSpec(
    "horizon_breaker_state", "gauge",
    "Circuit breaker state per model: 0 closed, 1 half-open, 2 open.",
    ("model",))
QUEUE_DEPTH = MetricSpec(
    "horizon_queue_depth", "gauge", "Requests waiting in a model's admission queue.", ("model",))
FUSION_STAGE_LATENCY = MetricSpec(
    "horizon_fusion_stage_seconds", "histogram",
    "Duration of one Fusion stage (panel, analysis, synthesis).",
    ("decision", "stage"), "stage_buckets_s")
ROUTING_LATENCY = MetricSpec(
    "horizon_routing_latency_seconds", "histogram",
    "Signal extraction plus decision selection time.",
    ("decision",), "routing_buckets_s")
SESSION_STORE_ERRORS = MetricSpec(
    "horizon_session_store_errors", "counter",
    "Session store operations that failed (the request was served without history).",
    ("backend", "operation"))
RATE_LIMIT_STORE_ERRORS = MetricSpec(
    "horizon_rate_limit_store_errors", "counter",
    "Shared rate-limit store calls that failed (the request was limited by the replica's own bucket).",
    ("backend",))
AUTH_REJECTIONS = MetricSpec(
    "horizon_auth_rejections", "counter",
    "Requests refused by access control: unauthenticated (401), forbidden (403), rate_limited (429).",
    ("reason",))

ALL_METRICS: tuple[MetricSpec, ...] = (
    REQUESTS, REQUEST_LATENCY, TIME_TO_FIRST_TOKEN, PROMPT_TOKENS, COMPLETION_TOKENS,
    MODEL_CALLS, MODEL_CALL_LATENCY, FALLBACKS, BREAKER_STATE, QUEUE_DEPTH,
    FUSION_STAGE_LATENCY, ROUTING_LATENCY, SESSION_STORE_ERRORS, RATE_LIMIT_STORE_ERRORS,
    AUTH_REJECTIONS,
)
# Names as registered with Ray (Prometheus adds the ``ray_`` prefix and suffixes).
METRIC_NAMES: list[str] = [spec.name for spec in ALL_METRICS]

# Ray's own series the dashboard and the alert rules (cluster/) query besides ours (Ray metrics
# agent and Ray Serve; names as a Ray 2.60 node exports them).
RAY_BUILTIN_SERIES: frozenset[str] = frozenset({
    "ray_node_mem_used",                     # host memory used per node, bytes
    "ray_node_mem_total",                    # host memory per node, bytes
    "ray_node_gram_used",                    # GPU memory used per GPU, MiB
    "ray_serve_deployment_replica_healthy",  # healthy replicas per deployment
    "ray_serve_deployment_status",           # 1 DEPLOY_FAILED, 2 UNHEALTHY, ... 6 HEALTHY
    "ray_serve_deployment_queued_queries",   # requests waiting in the router for a replica
    "ray_vllm_kv_cache_usage_perc",          # vLLM: share of the KV cache in use (model_name)
    "ray_vllm_request_queue_time_seconds_bucket",  # vLLM: time a request waited in the engine
})

BREAKER_STATE_VALUES: dict[str, int] = {"closed": 0, "half_open": 1, "open": 2}


def exported_series() -> frozenset[str]:
    """Every Prometheus series name our metrics produce (``ray_`` prefixed, with suffixes)."""
    return frozenset(name for spec in ALL_METRICS for name in spec.exported_series())


# --------------------------------------------------------------------------- backend


class MetricFactory(Protocol):
    """Builds the object recording one metric: it has ``inc`` (counter), ``set`` (gauge) or
    ``observe`` (histogram), each taking ``(value, tags=dict)`` like ``ray.serve.metrics``."""

    def __call__(self, spec: MetricSpec, boundaries: Optional[list[float]]) -> Any: ...


def ray_metric_factory(spec: MetricSpec, boundaries: Optional[list[float]]) -> Any:
    # Imported here: ray.serve.metrics pulls in Ray, which unit tests and the CLI avoid.
    from ray.serve import metrics as serve_metrics

    if spec.kind == "counter":
        return serve_metrics.Counter(spec.name, description=spec.description, tag_keys=spec.tag_keys)
    if spec.kind == "gauge":
        return serve_metrics.Gauge(spec.name, description=spec.description, tag_keys=spec.tag_keys)
    return serve_metrics.Histogram(spec.name, description=spec.description,
                                   boundaries=list(boundaries or []), tag_keys=spec.tag_keys)


class _Registry:
    """The lazily built metric objects of this process, and its counters' pending increments."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, Any] = {}
        self._factory: MetricFactory = ray_metric_factory
        self._settings = ObservabilitySettings()
        self._warned: set[str] = set()
        # (counter spec, tag values in tag_keys order) -> increments not yet recorded.
        self._pending: dict[tuple[MetricSpec, tuple[str, ...]], float] = {}
        self._pending_lock = threading.Lock()
        self._flusher: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def configure(self, settings: Optional[ObservabilitySettings], factory: Optional[MetricFactory]) -> None:
        self.flush()  # what was counted belongs to the old backend
        with self._lock:
            self._settings = settings or ObservabilitySettings()
            self._factory = factory or ray_metric_factory
            self._objects = {}
            self._warned = set()

    def _object(self, spec: MetricSpec) -> Any:
        obj = self._objects.get(spec.name)
        if obj is None:
            with self._lock:
                obj = self._objects.get(spec.name)
                if obj is None:
                    boundaries = (list(getattr(self._settings, spec.buckets_setting))
                                  if spec.buckets_setting else None)
                    obj = self._factory(spec, boundaries)
                    self._objects[spec.name] = obj
        return obj

    def emit(self, spec: MetricSpec, value: float, tags: dict[str, Any]) -> None:
        if spec.kind == "counter":
            self.count(((spec, tuple(str(tags[k]) for k in spec.tag_keys), value),))
            return
        self._record(spec, value, {k: str(tags[k]) for k in spec.tag_keys})

    def count(self, increments: Iterable[CounterIncrement]) -> None:
        """Add to counters, each given with its tag values in ``tag_keys`` order: one lock for
        all of a request's counters, recorded at the next flush (at once when the profile sets
        no flush interval)."""
        if self._settings.counter_flush_interval_s <= 0:
            for spec, values, value in increments:
                self._record(spec, value, dict(zip(spec.tag_keys, values)))
            return
        pending = self._pending
        with self._pending_lock:
            for spec, values, value in increments:
                key = (spec, values)
                pending[key] = pending.get(key, 0.0) + value
        if self._flusher is None:
            self._start_flusher()

    def _record(self, spec: MetricSpec, value: float, str_tags: dict[str, str]) -> None:
        try:
            obj = self._object(spec)
            if spec.kind == "counter":
                obj.inc(value, tags=str_tags)
            elif spec.kind == "gauge":
                obj.set(value, tags=str_tags)
            else:
                obj.observe(value, tags=str_tags)
        except Exception:  # noqa: BLE001 - telemetry must never fail a request
            if spec.name not in self._warned:
                self._warned.add(spec.name)
                log.warning("recording metric %s failed; further failures are not logged",
                            spec.name, exc_info=True)

    def flush(self) -> None:
        """Record every pending counter increment now."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for (spec, values), total in pending.items():
            self._record(spec, total, dict(zip(spec.tag_keys, values)))

    def _start_flusher(self) -> None:
        with self._lock:
            if self._flusher is not None:
                return
            self._flusher = threading.Thread(target=self._flush_loop, name="horizon-metrics-flush",
                                             daemon=True)
            self._flusher.start()
        atexit.register(self.flush)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._settings.counter_flush_interval_s or 1.0):
            self.flush()


_registry = _Registry()


def configure_metrics(settings: Optional[ObservabilitySettings] = None,
                      factory: Optional[MetricFactory] = None) -> None:
    """Set bucket boundaries (from the profile) and the backend; drops existing metric objects.

    Call once per process before traffic (e.g. in the ingress constructor); without it the
    schema's default buckets and ``ray.serve.metrics`` are used.
    """
    _registry.configure(settings, factory)


def flush_metrics() -> None:
    """Record the counters' pending increments now (they are otherwise recorded once per
    ``observability.counter_flush_interval_s``)."""
    _registry.flush()


# --------------------------------------------------------------------------- recording API


def record_request(decision: str, model: str, status: int | str, latency_s: float,
                   ttft_s: Optional[float] = None, tokens_in: int = 0, tokens_out: int = 0) -> None:
    """One answered client request. ``model`` is the alias that produced the answer (a Fusion
    slug for Fusion runs); ``status`` is the HTTP status sent; ``ttft_s`` only for streams."""
    tags = {"decision": decision, "model": model}
    values = (str(decision), str(model))
    counts: list[CounterIncrement] = [(REQUESTS, (*values, str(status)), 1)]
    if tokens_in:
        counts.append((PROMPT_TOKENS, values, tokens_in))
    if tokens_out:
        counts.append((COMPLETION_TOKENS, values, tokens_out))
    _registry.count(counts)
    _registry.emit(REQUEST_LATENCY, latency_s, tags)
    if ttft_s is not None:
        _registry.emit(TIME_TO_FIRST_TOKEN, ttft_s, tags)


def record_model_call(model: str, status: int | str, latency_s: float) -> None:
    """One call to a model deployment; the health panel's per-model success rate and latency."""
    _registry.count(((MODEL_CALLS, (str(model), str(status)), 1),))
    _registry.emit(MODEL_CALL_LATENCY, latency_s, {"model": model})


def record_fallback(task_type: str, from_model: str, to_model: str) -> None:
    _registry.emit(FALLBACKS, 1, {"task_type": task_type, "from_model": from_model, "to_model": to_model})


def set_breaker_state(model: str, state: str) -> None:
    """``state`` is ``closed``, ``half_open`` or ``open``."""
    if state not in BREAKER_STATE_VALUES:
        raise ValueError(f"unknown breaker state {state!r}; expected one of {list(BREAKER_STATE_VALUES)}")
    _registry.emit(BREAKER_STATE, BREAKER_STATE_VALUES[state], {"model": model})


def set_queue_depth(model: str, depth: int) -> None:
    _registry.emit(QUEUE_DEPTH, depth, {"model": model})


def record_fusion_stage(decision: str, stage: str, seconds: float) -> None:
    """``stage`` is e.g. ``panel``, ``analysis``, ``synthesis``."""
    _registry.emit(FUSION_STAGE_LATENCY, seconds, {"decision": decision, "stage": stage})


def record_routing(decision: str, seconds: float) -> None:
    _registry.emit(ROUTING_LATENCY, seconds, {"decision": decision})


def record_session_store_error(backend: str, operation: str) -> None:
    _registry.emit(SESSION_STORE_ERRORS, 1, {"backend": backend, "operation": operation})


def record_rate_limit_store_error(backend: str) -> None:
    _registry.emit(RATE_LIMIT_STORE_ERRORS, 1, {"backend": backend})


def record_auth_rejection(reason: str) -> None:
    """``reason`` is ``unauthenticated``, ``forbidden`` or ``rate_limited``."""
    _registry.emit(AUTH_REJECTIONS, 1, {"reason": reason})

