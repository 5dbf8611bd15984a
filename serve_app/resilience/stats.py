"""Rolling per-model call statistics for /health and metrics (success rate, latency)."""

from __future__ import annotations

from collections import deque
from typing import Optional


def _percentile(sorted_values: list[float], q: float) -> Optional[float]:
    if not sorted_values:
        return None
    # Nearest-rank percentile: exact on small windows, no interpolation surprises.
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


class ModelStats:
    """The last ``window`` calls of one model: outcome and latency."""

    def __init__(self, window: int = 200):
        self._calls: deque[tuple[bool, float]] = deque(maxlen=window)
        self.total = 0
        self.failures_total = 0

    def record(self, ok: bool, latency_s: float) -> None:
        self._calls.append((ok, latency_s))
        self.total += 1
        if not ok:
            self.failures_total += 1

    def snapshot(self) -> dict:
        calls = list(self._calls)
        ok_latencies = sorted(lat for ok, lat in calls if ok)
        p50 = _percentile(ok_latencies, 50)
        p95 = _percentile(ok_latencies, 95)
        return {
            "requests_total": self.total,
            "failures_total": self.failures_total,
            "success_rate": None if not calls else round(sum(ok for ok, _ in calls) / len(calls), 4),
            "latency_p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "latency_p95_ms": None if p95 is None else round(p95 * 1000, 1),
        }
