"""PNG plots of a load test: latency percentiles over time, replicas per model over time."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from .summary import metric_values, percentile
from .timing import RequestRecord


@dataclass(frozen=True)
class ReplicaSample:
    """Replicas of one model at one moment, as GET /health reported them."""

    t: float          # epoch seconds
    model: str
    replicas: int


@dataclass(frozen=True)
class PercentilePoint:
    t: float          # seconds since the test started, at the window's end
    p50: float
    p95: float
    p99: float
    count: int


def percentiles_over_time(records: Sequence[RequestRecord], metric: str, window_s: float,
                          t0: float) -> list[PercentilePoint]:
    """Percentiles (ms) of ``metric`` over requests *finished* in each ``window_s`` window."""
    if not records:
        return []
    end = max(r.end for r in records)
    points = []
    n = max(1, math.ceil((end - t0) / window_s))
    for i in range(n):
        lo, hi = t0 + i * window_s, t0 + (i + 1) * window_s
        values = metric_values([r for r in records if lo <= r.end < hi or (i == n - 1 and r.end == hi)], metric)
        if values:
            points.append(PercentilePoint(hi - t0, percentile(values, 50), percentile(values, 95),
                                          percentile(values, 99), len(values)))
    return points


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def plot_latency(records: Sequence[RequestRecord], out: Path, *, t0: float, window_s: float = 5.0,
                 marks: Sequence[tuple[float, str]] = ()) -> Path:
    """E2EL and TTFT p50/p95/p99 per window; ``marks`` are (seconds, label) vertical lines."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for ax, metric, label in ((axes[0], "e2el", "E2EL"), (axes[1], "ttft", "TTFT")):
        pts = percentiles_over_time(records, metric, window_s, t0)
        for attr, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ax.plot([p.t for p in pts], [getattr(p, attr) for p in pts], style, label=f"{label} {attr}")
        for t, text in marks:
            ax.axvline(t, color="grey", linewidth=0.8)
            ax.annotate(text, (t, 0), textcoords="offset points", xytext=(3, 3), fontsize=8)
        ax.set_ylabel(f"{label} (ms)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[1].set_xlabel(f"seconds since start ({window_s:g} s windows, by finish time)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_replicas(samples: Sequence[ReplicaSample], out: Path, *, t0: float,
                  models: Optional[Sequence[str]] = None, marks: Sequence[tuple[float, str]] = ()) -> Path:
    """Running replicas per model over time (a step line per model)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.5))
    names = list(models) if models else sorted({s.model for s in samples})
    for name in names:
        pts = sorted((s.t - t0, s.replicas) for s in samples if s.model == name)
        if pts:
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=name)
    for t, text in marks:
        ax.axvline(t, color="grey", linewidth=0.8)
        ax.annotate(text, (t, 0), textcoords="offset points", xytext=(3, 3), fontsize=8)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("running replicas")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
