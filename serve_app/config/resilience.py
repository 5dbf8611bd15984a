"""Resilience settings: breaker, admission queues, Retry-After, degradation, fallback chains."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator, model_validator

from .base import TASK_TYPES, Strict

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
    # Shared (Ray actor) store: how often a replica pushes the outcomes it has queued (none
    # queued: no call), and the pause between two of its watches of the shared state.
    sync_interval_s: float = Field(0.25, gt=0)
    # How long one watch waits at the registry for a change before it answers anyway: a change
    # answers it at once, so this only sets how often an idle replica calls (once per this long).
    watch_timeout_s: float = Field(10.0, gt=0)


class AdmissionSettings(Strict):
    """The ingress-side bounded priority queue in front of one model engine."""

    # Requests one model replica is sent at once by the whole gateway (each ingress replica
    # sends its share of capacity x running model replicas); None = the engine's decoding
    # slots, or scaling.max_ongoing_requests for a model scaled by Ray's ongoing_requests
    # policy (serve_app.resilience.admission.default_capacity). Priority only works while the
    # queue is held here, so Serve is told no more than this per replica.
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
    # the task type's fallback chain whose context fits (serve_app.chat.context_length); off = 400
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
