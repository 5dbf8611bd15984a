"""Load-test summary in vLLM's benchmark vocabulary (TTFT, TPOT, ITL, E2EL, goodput).

Goodput follows vLLM's ``--goodput`` definition: requests per second that met every stated
SLO. A streaming request is judged on TTFT, TPOT and E2EL; a non-streaming one shows no
first token, so only its E2EL SLO applies. Failed requests are never good.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from .timing import RequestRecord

METRICS = ("ttft", "tpot", "itl", "e2el")
METRIC_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class SLO:
    """Service-level objectives in milliseconds; None = not judged."""

    ttft_ms: Optional[float] = 2000.0
    tpot_ms: Optional[float] = 100.0
    e2el_ms: Optional[float] = 20000.0

    @classmethod
    def parse(cls, items: Sequence[str]) -> "SLO":
        """``["ttft:500", "e2el:8000"]`` (vLLM's ``--goodput`` syntax) → SLO; unnamed ones off."""
        values: dict[str, Optional[float]] = {"ttft_ms": None, "tpot_ms": None, "e2el_ms": None}
        for item in items:
            name, _, ms = item.partition(":")
            key = f"{name.strip().lower()}_ms"
            if key not in values:
                raise ValueError(f"unknown SLO {name!r}; use ttft, tpot or e2el")
            try:
                limit = float(ms)
            except ValueError:
                limit = math.nan
            if not math.isfinite(limit) or limit <= 0:
                raise ValueError(f"SLO {item!r}: expected METRIC:MS with MS a number above 0")
            values[key] = limit
        return cls(**values)

    def describe(self) -> str:
        parts = [f"{METRIC_LABELS[k]} ≤ {getattr(self, k + '_ms'):g} ms" for k in ("ttft", "tpot", "e2el")
                 if getattr(self, k + "_ms") is not None]
        return ", ".join(parts) or "none"

    def met_by(self, r: RequestRecord) -> bool:
        if not r.ok:
            return False
        if self.e2el_ms is not None and r.e2el_s * 1000 > self.e2el_ms:
            return False
        if r.stream:
            if self.ttft_ms is not None and (r.ttft_s is None or r.ttft_s * 1000 > self.ttft_ms):
                return False
            if self.tpot_ms is not None and r.tpot_s is not None and r.tpot_s * 1000 > self.tpot_ms:
                return False
        return True


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def metric_values(records: Iterable[RequestRecord], metric: str) -> list[float]:
    """Values in milliseconds of one metric over the successful requests."""
    out: list[float] = []
    for r in records:
        if not r.ok:
            continue
        if metric == "e2el":
            out.append(r.e2el_s * 1000)
        elif metric == "ttft" and r.ttft_s is not None:
            out.append(r.ttft_s * 1000)
        elif metric == "tpot" and r.tpot_s is not None:
            out.append(r.tpot_s * 1000)
        elif metric == "itl":
            out.extend(v * 1000 for v in r.itl_s)
    return out


@dataclass
class MetricStats:
    mean: float
    median: float
    p95: float
    p99: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "MetricStats":
        mean = sum(values) / len(values) if values else math.nan
        return cls(mean, percentile(values, 50), percentile(values, 95), percentile(values, 99), len(values))


@dataclass
class Summary:
    requests: int
    completed: int
    failed: int
    duration_s: float
    output_tokens: int
    good: int
    slo: SLO
    metrics: dict[str, MetricStats] = field(default_factory=dict)

    @property
    def request_throughput(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def goodput(self) -> float:
        return self.good / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def output_throughput(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0


def summarize(records: Sequence[RequestRecord], slo: SLO) -> Summary:
    ok = [r for r in records if r.ok]
    duration = (max(r.end for r in records) - min(r.start for r in records)) if records else 0.0
    return Summary(
        requests=len(records), completed=len(ok), failed=len(records) - len(ok), duration_s=duration,
        output_tokens=sum(r.output_tokens for r in ok), good=sum(1 for r in records if slo.met_by(r)), slo=slo,
        metrics={m: MetricStats.of(metric_values(records, m)) for m in METRICS})


def group_by(records: Iterable[RequestRecord], key: Callable[[RequestRecord], Optional[str]]
             ) -> dict[str, list[RequestRecord]]:
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(key(r) or "(none)", []).append(r)
    return dict(sorted(groups.items()))


def _ms(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1f}"


def _group_table(title: str, groups: dict[str, list[RequestRecord]]) -> list[str]:
    lines = [f"### {title}", "", "| name | requests | failed | mean E2EL (ms) | P95 E2EL (ms) | mean TTFT (ms) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, rs in groups.items():
        e2el = MetricStats.of(metric_values(rs, "e2el"))
        ttft = MetricStats.of(metric_values(rs, "ttft"))
        failed = sum(1 for r in rs if not r.ok)
        lines.append(f"| {name} | {len(rs)} | {failed} | {_ms(e2el.mean)} | {_ms(e2el.p95)} | {_ms(ttft.mean)} |")
    return lines + [""]


def markdown_report(records: Sequence[RequestRecord], slo: SLO, *, title: str = "Load test",
                    notes: Sequence[str] = (), images: Sequence[str] = ()) -> str:
    """The summary as markdown: vLLM-style result block, then per decision / model / category."""
    s = summarize(records, slo)
    lines = [f"# {title}", ""]
    lines += [f"- {n}" for n in notes]
    if notes:
        lines.append("")
    lines += ["| metric | value |", "|---|---:|",
              f"| Successful requests | {s.completed} |",
              f"| Failed requests | {s.failed} |",
              f"| Benchmark duration (s) | {s.duration_s:.2f} |",
              f"| Total generated tokens | {s.output_tokens} |",
              f"| Request throughput (req/s) | {s.request_throughput:.2f} |",
              f"| Request goodput (req/s) | {s.goodput:.2f} |",
              f"| Output token throughput (tok/s) | {s.output_throughput:.2f} |"]
    for metric in METRICS:
        st, label = s.metrics[metric], METRIC_LABELS[metric]
        lines += [f"| Mean {label} (ms) | {_ms(st.mean)} |", f"| Median {label} (ms) | {_ms(st.median)} |",
                  f"| P95 {label} (ms) | {_ms(st.p95)} |", f"| P99 {label} (ms) | {_ms(st.p99)} |"]
    lines += ["", f"Goodput SLOs: {slo.describe()} (non-streaming requests are judged on E2EL only). "
              f"{s.good} of {s.requests} requests met them.", ""]
    lines += _group_table("Per decision (x-vsr-selected-decision)", group_by(records, lambda r: r.decision))
    lines += _group_table("Per model (x-vsr-selected-model)", group_by(records, lambda r: r.model))
    lines += _group_table("Per traffic category", group_by(records, lambda r: r.category))
    errors = group_by((r for r in records if not r.ok), lambda r: f"{r.status} {(r.error or '')[:80]}")
    if errors:
        lines += ["### Errors", ""] + [f"- {n} × {k}" for k, n in ((k, len(v)) for k, v in errors.items())] + [""]
    lines += [f"![{Path(img).stem}]({Path(img).name})" for img in images]
    return "\n".join(lines).rstrip() + "\n"


def read_records(path: Path) -> list[RequestRecord]:
    if not path.exists():
        return []
    return [RequestRecord.from_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
