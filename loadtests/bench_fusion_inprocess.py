"""Fusion looper overhead, in process, against zero-latency model fakes.

overhead = total latency - (slowest panel member + every judge call), with each sub-call's
latency measured where the looper sees it (its own perf_counter around ``complete()``), so the
figure is the looper's own cost: policy-free orchestration, prompt rendering, JSON parsing,
trace and response assembly. Sub-calls cost ~0 here; the through-Ray benchmark adds the
deployment-handle hop. Target (issue 4): p50 <= 5 ms.

    .venv/bin/python loadtests/bench_fusion_inprocess.py [--iterations 500] [--panel-sizes 2,3,5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from serve_app.config.fusion import FusionParams# noqa: E402
from serve_app.fusion import FusionLooper, FusionPolicy  # noqa: E402

ANALYSIS = json.dumps({"consensus": ["a"], "contradictions": [], "partial_coverage": [],
                       "unique_insights": [], "blind_spots": []})
USAGE = {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}


class InstantModel:
    """A ModelClient that answers at once (or after ``latency_s``)."""

    def __init__(self, alias: str, latency_s: float):
        self.alias = alias
        self.latency_s = latency_s
        self.answer = f"{alias} says: " + "the answer is forty-two. " * 20

    async def complete(self, request: dict) -> dict:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        prompt = request["messages"][-1]["content"]
        text = ANALYSIS if "Return ONLY one compact JSON object" in prompt else self.answer
        return {"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
                "model": self.alias, "usage": USAGE,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}]}

    async def stream(self, request: dict):  # pragma: no cover - never used by Fusion
        yield {}


class InstantFleet:
    def __init__(self, aliases: list[str], latency_s: float):
        self.models = {a: InstantModel(a, latency_s) for a in aliases}

    def client(self, alias: str) -> InstantModel:
        return self.models[alias]

    @property
    def embedder(self):
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def bench(panel_size: int, iterations: int, mode: str, latency_s: float) -> dict:
    panel = [f"m{i}" for i in range(panel_size)]
    fleet = InstantFleet(panel + ["judge"], latency_s)
    policy = FusionPolicy.from_params("bench", FusionParams(model="judge", analysis_mode=mode), panel)
    looper = FusionLooper(fleet)
    request = {"model": "vllm-sr/fusion", "messages": [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "What is the answer to everything? " * 10}]}
    for _ in range(min(50, iterations)):            # warm-up: imports, template cache
        await looper.run(request, policy)
    totals, overheads, calls = [], [], []
    for _ in range(iterations):
        started = time.perf_counter()
        outcome = await looper.run(request, policy)
        total_ms = (time.perf_counter() - started) * 1000
        members = [r["latency_ms"] for r in outcome.trace["responses"]]
        judges = [c["latency_ms"] for c in outcome.trace["judge_calls"]]
        totals.append(total_ms)
        overheads.append(total_ms - (max(members) + sum(judges)))
        calls.extend(members + judges)
    return {"panel_size": panel_size, "mode": mode, "iterations": iterations,
            "total_p50_ms": statistics.median(totals), "total_p95_ms": percentile(totals, 0.95),
            "overhead_p50_ms": statistics.median(overheads),
            "overhead_p95_ms": percentile(overheads, 0.95),
            "sub_call_p50_ms": statistics.median(calls)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--panel-sizes", default="2,3,5")
    parser.add_argument("--mode", choices=["separate", "one_call", "none"], default="separate")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="latency of every fake sub-call (0 = instant)")
    parser.add_argument("--target-p50-ms", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = [asyncio.run(bench(int(n), args.iterations, args.mode, args.latency_ms / 1000))
            for n in args.panel_sizes.split(",")]
    print(f"Fusion looper overhead, in process ({args.mode}, {args.iterations} runs, "
          f"sub-call latency {args.latency_ms:g} ms)")
    print("| panel | overhead p50 ms | overhead p95 ms | total p50 ms | total p95 ms | sub-call p50 ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['panel_size']} | {r['overhead_p50_ms']:.3f} | {r['overhead_p95_ms']:.3f} | "
              f"{r['total_p50_ms']:.3f} | {r['total_p95_ms']:.3f} | {r['sub_call_p50_ms']:.4f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    worst = max(r["overhead_p50_ms"] for r in rows)
    verdict = "meets" if worst <= args.target_p50_ms else "MISSES"
    print(f"worst overhead p50 {worst:.3f} ms {verdict} the {args.target_p50_ms:g} ms target")
    return 0 if worst <= args.target_p50_ms else 1


if __name__ == "__main__":
    sys.exit(main())
