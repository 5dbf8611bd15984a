"""Plain-text rendering of a :class:`PlanReport` (what ``horizon plan`` prints)."""

from __future__ import annotations

from typing import Any, Optional

from .planner import PlanReport


def _num(value: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return out


def render(report: PlanReport) -> str:
    rows: list[list[Any]] = []
    for m in report.models:
        kv_kib = None if m.kv_bytes_per_token is None else m.kv_bytes_per_token / 1024
        rows.append([m.alias, m.backend, m.node_type or "-", _num(m.gpus_per_replica, "{:g}"),
                     _num(m.weight_gb), _num(m.replica_gpu_memory_gb), _num(m.headroom_gb),
                     _num(m.kv_pool_gb), _num(kv_kib), _num(m.context_tokens, "{:d}"),
                     _num(m.sequences_at_context, "{:d}"), _num(m.concurrency_per_replica, "{:d}"),
                     _num(m.target_qps, "{:g}"), _num(m.suggested_replicas, "{:d}")])
    lines = [f"profile {report.profile}: capacity plan (GB = 1e9 bytes)", ""]
    lines += _table(["model", "backend", "node", "GPUs", "weights", "GPU mem", "after wts",
                     "KV pool", "KV KiB/tok", "context", "seqs", "conc/rep", "QPS", "replicas"], rows)
    if report.nodes:
        lines += [""]
        node_rows = [[n.name, str(n.gpus), f"{n.resident_gpus:g} (from {n.resident_peak_at})",
                      f"{n.max_gpus:g}", ", ".join(n.models) or "-"] for n in report.nodes]
        lines += _table(["node type", "GPUs", "resident peak", "at max replicas", "models"], node_rows)
    notes = [f"  {m.alias}: {note}" for m in report.models for note in m.notes]
    notes += [f"  {n.name}: {note}" for n in report.nodes for note in n.notes]
    if notes:
        lines += ["", "notes:"] + notes
    if report.errors:
        lines += ["", "IMPOSSIBLE PLACEMENT:"] + [f"  {e}" for e in report.errors]
    else:
        lines += ["", "placement: OK"]
    return "\n".join(lines)
