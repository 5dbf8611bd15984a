"""Shared by every benchmark that interleaves its variants over rounds: the per-row median and
min-max, its table format, and the machine a run was made on (issue 18: a figure names its
machine and command, and a difference inside the spread is no measurable difference)."""

from __future__ import annotations

import argparse
import math
import operator
import os
import platform
from pathlib import Path
from typing import Iterable, Optional, Sequence


MIN_ROUNDS = 3


def rounds_count(text: str) -> int:
    """The ``--rounds`` argument: at least three, for a median and a spread."""
    n = int(text)
    if n < MIN_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_ROUNDS}: a median and a spread need "
                                         "three rounds")
    return n


def add_rounds_argument(parser: argparse.ArgumentParser, help: str = "interleaved rounds (>= 3)") -> None:
    """``--rounds`` as every benchmark takes it (default 3, fewer refused at parse time)."""
    parser.add_argument("--rounds", type=rounds_count, default=MIN_ROUNDS, help=help)


def stats(values: list[float]) -> dict:
    """Median, min and max of the finite values (NaN when there are none)."""
    ordered = sorted(v for v in values if v == v)
    if not ordered:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1]}


def median_interval(values: list[float], confidence: float = 0.95) -> Optional[tuple[float, float]]:
    """The distribution-free interval of the median: the order statistics ``(x_(k), x_(n+1-k))``
    for the largest ``k`` whose coverage, ``1 - 2 P(Binomial(n, 1/2) <= k - 1)``, is still at least
    ``confidence``. It assumes nothing about the rounds' distribution, only that they are
    independent draws of the same thing. None when there are too few rounds for even the
    min-max range to reach ``confidence`` (fewer than 6 at 95 %)."""
    ordered = sorted(v for v in values if v == v)
    n = len(ordered)
    tail = (1.0 - confidence) / 2
    k, below = 0, 0.0            # below = P(Binomial(n, 1/2) <= k - 1)
    while k < n // 2:
        nxt = below + math.comb(n, k) / 2 ** n
        if nxt > tail:
            break
        k, below = k + 1, nxt
    if k == 0:
        return None
    return ordered[k - 1], ordered[n - k]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table: the header, its rule, then one line per row (cells already formatted)."""
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_interval(interval: Optional[tuple[float, float]], digits: int = 3) -> str:
    """``low–high``, or "–" when there were too few rounds for an interval."""
    return "–" if interval is None else f"{interval[0]:.{digits}f}–{interval[1]:.{digits}f}"


_COMPARE = {">=": operator.ge, "<=": operator.le}


def verdict(interval: Optional[tuple[float, float]], target: str) -> str:
    """``target`` such as ">= 0.95" against the median's interval: "met" when the whole interval
    is on the target's side, "not met" when the whole of it is on the other side, otherwise
    "no measurable difference from the target" (and "too few rounds" with no interval)."""
    op, _, bound = target.partition(" ")
    if op not in _COMPARE:
        raise ValueError(f"target {target!r}: expected '>= x' or '<= x'")
    if interval is None:
        return "too few rounds"
    ok = [_COMPARE[op](end, float(bound)) for end in interval]
    if all(ok):
        return "met"
    if not any(ok):
        return "not met"
    return "no measurable difference from the target"


def rotated(items, round_index: int):
    """The round's order: ``items`` rotated by the round's index, so no variant always runs
    first or last."""
    shift = round_index % len(items)
    return items[shift:] + items[:shift]


def fmt(st: dict, digits: int = 2) -> str:
    """``median (min–max)``."""
    return f"{st['median']:.{digits}f} ({st['min']:.{digits}f}–{st['max']:.{digits}f})"


def differs(a: dict, b: dict) -> bool:
    """True when two rows' min-max ranges do not overlap: anything else is written as no
    measurable difference."""
    return a["max"] < b["min"] or b["max"] < a["min"]


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "machine": platform.machine()}
