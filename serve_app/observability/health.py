"""Rolling per-model latency and success figures for the ``/health`` endpoint.

Prometheus holds the long history; ``/health`` answers "how is each model doing right now"
from this replica's own recent calls, without a Prometheus round trip. The ingress adds what
other components own (queue length, replicas, breaker state) to :meth:`snapshot`'s figures.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class ModelHealth:
    model: str
    calls: int
    # Share of calls in the window that succeeded; None when there were none.
    success_rate: Optional[float]
    p50_latency_s: Optional[float]
    p95_latency_s: Optional[float]

    def as_dict(self) -> dict:
        return asdict(self)


def _percentile(sorted_values: list[float], q: float) -> float:
    # Nearest-rank percentile: an observed value, never an interpolation between two.
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


class ModelHealthTracker:
    """Outcomes of model calls over the last ``window_s`` seconds, per model."""

    def __init__(self, window_s: float = 300.0, *, max_samples_per_model: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._max = max_samples_per_model
        self._lock = threading.Lock()
        # model -> deque of (timestamp, ok, latency_s), oldest first
        self._samples: dict[str, deque[tuple[float, bool, float]]] = {}

    def record(self, model: str, ok: bool, latency_s: float) -> None:
        with self._lock:
            samples = self._samples.setdefault(model, deque(maxlen=self._max))
            samples.append((self._clock(), ok, latency_s))

    def _evict(self, samples: deque[tuple[float, bool, float]], now: float) -> None:
        while samples and now - samples[0][0] > self.window_s:
            samples.popleft()

    def health(self, model: str) -> ModelHealth:
        now = self._clock()
        with self._lock:
            samples = self._samples.get(model, deque())
            self._evict(samples, now)
            window = list(samples)
        if not window:
            return ModelHealth(model, 0, None, None, None)
        # Latency percentiles of successful calls: failures (often instant rejections or
        # timeouts) would make a failing model look fast or slow for the wrong reason.
        latencies = sorted(lat for _, ok, lat in window if ok)
        ok_count = sum(1 for _, ok, _ in window if ok)
        return ModelHealth(
            model=model,
            calls=len(window),
            success_rate=ok_count / len(window),
            p50_latency_s=_percentile(latencies, 0.50) if latencies else None,
            p95_latency_s=_percentile(latencies, 0.95) if latencies else None,
        )

    def snapshot(self, models: Optional[list[str]] = None) -> dict[str, ModelHealth]:
        """Figures for ``models`` (every fleet alias, so idle models appear too) or all seen."""
        with self._lock:
            names = list(models) if models is not None else sorted(self._samples)
        return {name: self.health(name) for name in names}
