"""Shared by every benchmark that interleaves its variants over rounds: the per-row median and
min-max, its table format, and the machine a run was made on (issue 18: a figure names its
machine and command, and a difference inside the spread is no measurable difference)."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path


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
