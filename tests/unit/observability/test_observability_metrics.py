"""The metrics module: names, tags, lazy creation and the record_* functions."""

from __future__ import annotations

import logging

import pytest

from serve_app.config.observability import ObservabilitySettings
from serve_app.observability import metrics as m
from serve_app.observability.recording import RecordingMetrics


@pytest.fixture
def rec():
    recorder = RecordingMetrics()
    m.configure_metrics(ObservabilitySettings(latency_buckets_s=[0.5, 1, 5]), factory=recorder)
    yield recorder
    m.configure_metrics()


def test_metric_names_are_unique_prometheus_names_without_serve_tag_clashes():
    assert len(m.METRIC_NAMES) == len(set(m.METRIC_NAMES))
    for spec in m.ALL_METRICS:
        assert spec.name.startswith("horizon_") and spec.name.replace("_", "").isalnum()
        assert not set(spec.tag_keys) & m.RAY_SERVE_TAG_KEYS, spec.name
        assert (spec.buckets_setting is not None) == (spec.kind == "histogram"), spec.name
    assert "ray_horizon_requests_total" in m.exported_series()
    assert "ray_horizon_request_latency_seconds_bucket" in m.exported_series()
    assert "ray_horizon_queue_depth" in m.exported_series()


def test_nothing_is_created_until_first_use(rec):
    assert rec.created == {}
    m.record_routing("chat", 0.003)
    assert list(rec.created) == ["horizon_routing_latency_seconds"]


def test_record_request_fills_counter_histograms_and_tokens(rec):
    m.record_request("code", "coder", 200, latency_s=1.2, ttft_s=0.3, tokens_in=50, tokens_out=20)
    m.record_request("code", "coder", 200, latency_s=0.8)
    m.record_request("code", "k2", 504, latency_s=120.0)
    assert rec.value("horizon_requests", decision="code", model="coder", status="200") == 2
    assert rec.value("horizon_requests", decision="code", model="k2", status="504") == 1
    assert rec.observed("horizon_request_latency_seconds", decision="code", model="coder") == [1.2, 0.8]
    assert rec.observed("horizon_time_to_first_token_seconds", decision="code", model="coder") == [0.3]
    assert rec.value("horizon_prompt_tokens", decision="code", model="coder") == 50
    assert rec.value("horizon_completion_tokens", decision="code", model="coder") == 20
    # Buckets come from the profile.
    assert rec.created["horizon_request_latency_seconds"].boundaries == [0.5, 1, 5]


def test_other_recorders(rec):
    m.record_model_call("qwen-72b", 502, 0.4)
    m.record_fallback("reasoning", "r1-distill", "k2")
    m.set_breaker_state("r1-distill", "open")
    m.set_breaker_state("r1-distill", "half_open")
    m.set_queue_depth("k2", 7)
    m.record_fusion_stage("fusion_panel", "panel", 3.5)
    m.record_session_store_error("redis", "append")
    m.record_rate_limit_store_error("redis")
    m.record_auth_rejection("forbidden")
    assert rec.value("horizon_model_calls", model="qwen-72b", status="502") == 1
    assert rec.observed("horizon_model_call_latency_seconds", model="qwen-72b") == [0.4]
    assert rec.value("horizon_fallbacks", task_type="reasoning", from_model="r1-distill", to_model="k2") == 1
    assert rec.value("horizon_breaker_state", model="r1-distill") == 1
    assert rec.value("horizon_queue_depth", model="k2") == 7
    assert rec.observed("horizon_fusion_stage_seconds", decision="fusion_panel", stage="panel") == [3.5]
    assert rec.value("horizon_session_store_errors", backend="redis", operation="append") == 1
    assert rec.value("horizon_rate_limit_store_errors", backend="redis") == 1
    assert rec.value("horizon_auth_rejections", reason="forbidden") == 1
    with pytest.raises(ValueError):
        m.set_breaker_state("k2", "ajar")


def test_a_broken_metrics_backend_never_fails_the_caller(caplog):
    def exploding_factory(spec, boundaries):
        raise RuntimeError("no metrics agent")

    m.configure_metrics(factory=exploding_factory)
    logger = logging.getLogger("serve_app.observability.metrics")
    logger.addHandler(caplog.handler)
    try:
        for _ in range(3):
            m.record_request("chat", "qwen-72b", 200, 0.1)
    finally:
        logger.removeHandler(caplog.handler)
        m.configure_metrics()
    warned = {id(r): r for r in caplog.records if "recording metric" in r.getMessage()}
    # One warning per metric, not per call.
    assert len(warned) == 2  # horizon_requests and horizon_request_latency_seconds


def test_every_recorder_is_accepted_by_ray_serve_metrics(caplog):
    """Ray's metric classes validate tag keys; run every recorder through them (no cluster:
    recording without a Ray worker is a no-op, but tag validation still runs)."""
    pytest.importorskip("ray.serve.metrics")
    m.configure_metrics()  # the real ray.serve.metrics backend
    logger = logging.getLogger("serve_app.observability.metrics")
    logger.addHandler(caplog.handler)
    try:
        m.record_request("chat", "qwen-72b", 200, 0.2, ttft_s=0.1, tokens_in=3, tokens_out=4)
        m.record_model_call("qwen-72b", 200, 0.2)
        m.record_fallback("chat", "qwen-72b", "k2")
        m.set_breaker_state("k2", "closed")
        m.set_queue_depth("k2", 0)
        m.record_fusion_stage("fusion_panel", "synthesis", 1.0)
        m.record_routing("chat", 0.01)
        m.record_session_store_error("redis", "history")
        m.record_rate_limit_store_error("redis")
        m.record_auth_rejection("unauthenticated")
        m.flush_metrics()  # counters reach Ray's objects on a flush
    finally:
        logger.removeHandler(caplog.handler)
    assert not [r for r in caplog.records if "recording metric" in r.getMessage()]
    assert set(m._registry._objects) == set(m.METRIC_NAMES)


class _CountingBackend(RecordingMetrics):
    """Counts the calls that reach the backend (each is a Ray record on a replica)."""

    def __init__(self) -> None:
        super().__init__()
        self.incs = 0

    def __call__(self, spec, boundaries):
        obj = super().__call__(spec, boundaries)
        inc = obj.inc

        def counted(value=1.0, tags=None):
            self.incs += 1
            inc(value, tags)
        obj.inc = counted
        return obj


@pytest.fixture
def counting():
    """``counting(interval)``: a counting backend with that counter flush interval, reset after."""
    def make(interval: float) -> _CountingBackend:
        backend = _CountingBackend()
        m.configure_metrics(ObservabilitySettings(counter_flush_interval_s=interval), factory=backend)
        return backend
    yield make
    m.configure_metrics()


def test_counters_are_summed_in_process_and_recorded_once_per_series_per_flush(counting):
    backend = counting(30)
    for _ in range(50):
        m.record_request("chat", "k2", 200, latency_s=0.01, tokens_in=3, tokens_out=2)
    m.record_request("chat", "k2", 500, latency_s=0.01)
    # Histograms are recorded at once; counters wait for the flush.
    assert len(backend.observed("horizon_request_latency_seconds", decision="chat", model="k2")) == 51
    assert backend.incs == 0
    m.flush_metrics()
    # Four series: requests 200, requests 500, prompt tokens, completion tokens.
    assert backend.incs == 4
    assert backend.value("horizon_requests", decision="chat", model="k2", status="200") == 50
    assert backend.value("horizon_requests", decision="chat", model="k2", status="500") == 1
    assert backend.value("horizon_prompt_tokens", decision="chat", model="k2") == 150
    assert backend.value("horizon_completion_tokens", decision="chat", model="k2") == 100


def test_with_no_flush_interval_every_counter_is_recorded_at_once_with_its_tags(counting):
    backend = counting(0)
    m.record_request("chat", "k2", 200, latency_s=0.01, tokens_in=3, tokens_out=2)
    m.record_model_call("k2", 502, latency_s=0.02)
    assert backend.incs == 4  # requests, prompt and completion tokens, model calls
    assert backend.value("horizon_requests", decision="chat", model="k2", status="200") == 1
    assert backend.value("horizon_prompt_tokens", decision="chat", model="k2") == 3
    assert backend.value("horizon_completion_tokens", decision="chat", model="k2") == 2
    assert backend.value("horizon_model_calls", model="k2", status="502") == 1
    assert backend.observed("horizon_model_call_latency_seconds", model="k2") == [0.02]


def test_the_flush_thread_records_pending_counters_without_being_asked(counting):
    import time

    backend = counting(0.05)
    m.record_auth_rejection("unauthenticated")
    deadline = time.monotonic() + 5
    while backend.incs == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.incs == 1
    assert backend.values["horizon_auth_rejections"][frozenset({("reason", "unauthenticated")})] == 1


def test_a_zero_interval_records_each_increment_at_once(counting):
    backend = counting(0)
    m.record_model_call("k2", 200, 0.1)
    m.record_model_call("k2", 200, 0.1)
    assert backend.incs == 2
