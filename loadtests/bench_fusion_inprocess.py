"""Fusion looper overhead, in process, against zero-latency model fakes.

overhead = total latency - (slowest panel member + every judge call), with each sub-call's
latency measured where the looper sees it (its own perf_counter around ``complete()``), so the
figure is the looper's own cost: policy-free orchestration, prompt rendering, JSON parsing,
trace and response assembly. Sub-calls cost ~0 here; the through-Ray benchmark adds the
deployment-handle hop. Target (issue 4): p50 <= 5 ms.

How (issue 18): ``--rounds`` rounds (>= 3, default 3) each run every panel size once
(``--iterations`` looper runs after a warm-up), the panel sizes' order rotating by one from
round to round. The table gives each panel's figures as median (min–max) over the rounds; the
target verdict reads the median over the rounds of the worst panel's p50 and says how many
rounds were within it. The panel sizes are levels, not variants competing for a gain, so no
comparison between them is drawn. The machine, the exact command and every round's rows go to
``--out`` (default ``loadtests/results/fusion_inprocess.json``; ``--json`` alone writes only
the per-panel rows, medians with ``_min``/``_max``, as before). A default run takes seconds,
so the per-round size is unchanged.

    python loadtests/bench_fusion_inprocess.py [--rounds 3] [--iterations 500] [--panel-sizes 2,3,5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.lib.rounds import add_rounds_argument, fmt, machine, rotated, stats  # noqa: E402
from serve_app.config.fusion import FusionParams  # noqa: E402
from serve_app.fusion import FusionLooper, FusionPolicy  # noqa: E402

ANALYSIS = json.dumps({"consensus": ["a"], "contradictions": [], "partial_coverage": [],
                       "unique_insights": [], "blind_spots": []})
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fusion_inprocess.json"
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


FIGURES = ("overhead_p50_ms", "overhead_p95_ms", "total_p50_ms", "total_p95_ms", "sub_call_p50_ms")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500, help="looper runs per panel per round")
    parser.add_argument("--panel-sizes", default="2,3,5")
    parser.add_argument("--mode", choices=["separate", "one_call", "none"], default="separate")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="latency of every fake sub-call (0 = instant)")
    parser.add_argument("--target-p50-ms", type=float, default=5.0)
    add_rounds_argument(parser, help="rounds over every panel size (>= 3)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the full JSON goes (default loadtests/results/fusion_inprocess.json, "
                             "unless --json alone is given)")
    parser.add_argument("--json", type=Path,
                        help="also write the per-panel rows (medians over the rounds) to this file")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.panel_sizes.split(",")]
    rounds = []
    for r in range(args.rounds):
        order = rotated(sizes, r)
        rows = {n: asyncio.run(bench(n, args.iterations, args.mode, args.latency_ms / 1000)) for n in order}
        rounds.append({"round": r + 1, "order": order, "rows": [rows[n] for n in sizes]})

    summary = []
    for i, n in enumerate(sizes):
        row = {"panel_size": n, "mode": args.mode, "iterations": args.iterations, "rounds": args.rounds}
        for key in FIGURES:
            row[key] = stats([rnd["rows"][i][key] for rnd in rounds])
        summary.append(row)
    worst_per_round = [max(r["overhead_p50_ms"] for r in rnd["rows"]) for rnd in rounds]
    worst = stats(worst_per_round)
    rounds_met = sum(1 for w in worst_per_round if w <= args.target_p50_ms)
    meets = worst["median"] <= args.target_p50_ms

    info = machine()
    command = shlex.join(["python", "loadtests/bench_fusion_inprocess.py", *argv])
    print(f"Fusion looper overhead, in process ({args.mode}, {args.iterations} runs per panel per round, "
          f"{args.rounds} rounds (order rotating), sub-call latency {args.latency_ms:g} ms); "
          f"median (min–max) over the rounds")
    print(f"machine: {info['cpus']} CPUs, {info['cpu']}; command: `{command}`")
    print()
    print("| panel | overhead p50 ms | overhead p95 ms | total p50 ms | total p95 ms | sub-call p50 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in summary:
        print(f"| {r['panel_size']} | {fmt(r['overhead_p50_ms'], 3)} | {fmt(r['overhead_p95_ms'], 3)} | "
              f"{fmt(r['total_p50_ms'], 3)} | {fmt(r['total_p95_ms'], 3)} | {fmt(r['sub_call_p50_ms'], 4)} |")
    print()
    verdict = "meets" if meets else "MISSES"
    print(f"worst overhead p50 {fmt(worst, 3)} ms {verdict} the {args.target_p50_ms:g} ms target "
          f"({rounds_met}/{args.rounds} rounds within it)")

    if args.json:
        args.json.write_text(json.dumps([{**{k: v for k, v in r.items() if k not in FIGURES},
                                          **{k: r[k]["median"] for k in FIGURES},
                                          **{f"{k}_min": r[k]["min"] for k in FIGURES},
                                          **{f"{k}_max": r[k]["max"] for k in FIGURES}}
                                         for r in summary], indent=2))
    out = args.out if args.out is not None else (None if args.json else DEFAULT_OUT)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "benchmark": "fusion_inprocess", "machine": info, "command": command,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "rounds": rounds, "summary": summary,
            "target": {"overhead_p50_ms": args.target_p50_ms, "worst_overhead_p50_ms_per_round": worst_per_round,
                       "worst_overhead_p50_ms": worst, "rounds_within": rounds_met,
                       "verdict": f"{verdict} (median of the worst panel's p50 per round)"}}, indent=2) + "\n")
        print(f"\nwrote {out}")
    return 0 if meets else 1


if __name__ == "__main__":
    sys.exit(main())
