"""The in-process priority benchmark runs, keeps the engine within capacity, and shows the
high-priority class served sooner than under FIFO on the same arrivals."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "loadtests" / "bench_priority_inprocess.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_priority_inprocess", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_priority_beats_fifo_for_the_high_class_on_identical_arrivals():
    bench = _load()
    arrivals = bench.schedule(seconds=2.0, load=1.1, capacity=4, time_scale=0.004, seed=3)
    fifo = asyncio.run(bench.run_mode(arrivals, 4, 512, priority=False, aging_s=None))
    prio = asyncio.run(bench.run_mode(arrivals, 4, 512, priority=True, aging_s=None))
    for result in (fifo, prio):
        assert result["max_in_flight"] <= 4
        served = sum(len(v) for v in result["latencies"].values())
        assert served + sum(result["rejected"].values()) + sum(result["failed"].values()) == len(arrivals)

    def high(r):
        return [v for t in bench.HIGH_PRIORITY for v in r["latencies"][t]]

    assert bench.p95(high(prio)) < 0.7 * bench.p95(high(fifo))
