"""Log format and metric histogram buckets."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from .base import Strict

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
    # The format of every line in the replicas' logs (logs/serve/replica_*.log), Serve's and
    # ours: json (one JSON object per line) or text, given to every deployment the app builds as
    # Serve's logging_config.encoding. Unset: Serve's logging_config decides (the Serve
    # application's, else Serve's default, text).
    log_format: Optional[Literal["json", "text"]] = None
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
    # Counters are summed in the process and handed to Ray once per interval (s) instead of on
    # every request: a Ray metric record costs tens of microseconds, and a request adds to four
    # counters. Ray exports every few seconds anyway. 0 records each increment at once.
    counter_flush_interval_s: float = Field(1.0, ge=0, le=60)
    # Ray Serve's access log: one line per request in every deployment's replica log (method,
    # route, status, latency). Kept by default. Off, Serve drops the line before formatting and
    # writing it: less log volume at high request rates, and about one point less of the
    # ingress's CPU on the zero-latency fleet (docs/benchmarks.md, "Where the ingress's time goes").
    access_log: bool = True

    @field_validator("latency_buckets_s", "ttft_buckets_s", "stage_buckets_s", "routing_buckets_s")
    @classmethod
    def _buckets(cls, value: list[float]) -> list[float]:
        return _ascending_positive(value)
