"""Priority admission vs plain FIFO under saturation, in process (no Ray, no engines).

What it measures: the seed's claim (SPEC §6) that ordering the waiting line by priority class
(vision and simple chat first, code and deep reasoning later) cuts the high-priority P95 by
about 30 %. Both modes run the same arrival schedule through :class:`ResilientFleet` into one
saturated engine line, and the table shows them side by side.

The set-up, stated plainly:

* Traffic mix of the seed (SPEC §2): ~65 % cheap paths (chat 30 %, code 20 %, vision 15 %),
  20 % deep reasoning (r1-distill), 15 % complex reasoning (k2). Each request holds an engine
  slot for its task's measured mean total time (3.2 / 4.1 / 2.5 / 9.8 / 18.6 s), with ±30 %
  jitter, times ``--time-scale``.
* One engine line carries the whole mix: every alias shares one engine
  (``shares_engine_with``, as the CPU profile runs one engine for all text roles), so its
  ``capacity`` slots are contended by all classes. Priority only matters where classes share
  a line; a line that only ever sees one class is FIFO either way.
* Open-loop Poisson arrivals at ``--load`` times the line's throughput (> 1 = saturated);
  the bounded queue answers 429 when full (counted per class).
* FIFO = the same code with every task type in one priority class.

How (issue 18): ``--rounds`` rounds (>= 3, default 3); round r draws its arrival schedule with
seed ``--seed + r`` and runs both modes on it, FIFO first in odd rounds and priority first in
even ones. The table gives each class's P95 and 429 count as median (min–max) over the rounds;
the high-priority reduction (1 - priority P95 / FIFO P95) is computed per round and reported as
median (min–max), and when the two modes' high-priority P95 ranges overlap it is written as "no
measurable difference", not as a gain. The machine, the exact command and every round's figures
go to ``--out`` (default ``loadtests/results/priority_inprocess.json``). The arrival window stays
15 s per mode per round, so a default run takes about two minutes.

Run: ``python loadtests/bench_priority_inprocess.py [--rounds 3] [--seconds 15] [--load 1.05]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.lib.rounds import add_rounds_argument, differs, fmt, machine, stats  # noqa: E402
from serve_app.config import parse_config  # noqa: E402
from serve_app.errors import HorizonError, RateLimited  # noqa: E402
from serve_app.resilience import ResilientFleet  # noqa: E402

# task type -> (alias the default routing picks, share of traffic, mean total seconds) — SPEC §2.
MIX: dict[str, tuple[str, float, float]] = {
    "chat": ("qwen-72b", 0.30, 3.2),
    "code": ("coder", 0.20, 4.1),
    "vision": ("minicpm-v", 0.15, 2.5),
    "reasoning": ("r1-distill", 0.20, 9.8),
    "unknown": ("k2", 0.15, 18.6),       # complex reasoning on K2
}
PRIORITIES = {"vision": 0, "chat": 0, "code": 2, "reasoning": 3, "unknown": 3}
HIGH_PRIORITY = ("chat", "vision")
ENGINE_OWNER = "qwen-72b"
TARGET_REDUCTION = 0.30
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "priority_inprocess.json"


@dataclass
class Arrival:
    at_s: float
    task_type: str
    service_s: float


class SharedEngine:
    """A fake engine: every alias is the same pool of slots; a call sleeps its service time."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0

    def client(self, alias: str) -> "SharedEngine._Client":
        return SharedEngine._Client(self, alias)

    @property
    def embedder(self) -> None:
        return None

    class _Client:
        def __init__(self, engine: "SharedEngine", alias: str):
            self.engine, self.alias = engine, alias

        async def complete(self, request: dict) -> dict:
            self.engine.in_flight += 1
            self.engine.max_in_flight = max(self.engine.max_in_flight, self.engine.in_flight)
            try:
                await asyncio.sleep(request["service_s"])
            finally:
                self.engine.in_flight -= 1
            return {"object": "chat.completion", "model": self.alias,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                 "finish_reason": "stop"}]}

        async def stream(self, request: dict):  # pragma: no cover - not used here
            raise NotImplementedError
            yield {}


def make_config(capacity: int, max_queue_size: int, priority: bool, aging_s: Optional[float]):
    models = []
    for task, (alias, _, _) in MIX.items():
        m = {"alias": alias, "role": {"unknown": "coordinator", "reasoning": "reasoning",
                                      "code": "code", "vision": "vision"}.get(task, "chat"),
             "backend": "simulated", "engine": {"model": f"bench/{alias}"},
             "timeouts": {"first_token_s": 3600, "total_s": 3600}}
        if alias != ENGINE_OWNER:
            m["shares_engine_with"] = ENGINE_OWNER
        models.append(m)
    resilience: dict[str, Any] = {
        "priorities": PRIORITIES if priority else {t: 0 for t in PRIORITIES},
        "admission": {ENGINE_OWNER: {"capacity": capacity, "max_queue_size": max_queue_size}},
        "priority_aging_s": aging_s,
    }
    return parse_config({"profile": "bench", "models": models, "resilience": resilience,
                         "routing": {"default_decision": "d",
                                     "decisions": [{"name": "d", "modelRefs": [{"model": ENGINE_OWNER}]}]}})


def schedule(seconds: float, load: float, capacity: int, time_scale: float, seed: int) -> list[Arrival]:
    rng = random.Random(seed)
    tasks = list(MIX)
    weights = [MIX[t][1] for t in tasks]
    mean_service = sum(MIX[t][1] * MIX[t][2] for t in tasks) * time_scale
    rate = load * capacity / mean_service          # arrivals per second
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        task = rng.choices(tasks, weights)[0]
        out.append(Arrival(t, task, MIX[task][2] * time_scale * rng.uniform(0.7, 1.3)))


async def run_mode(arrivals: list[Arrival], capacity: int, max_queue_size: int, priority: bool,
                   aging_s: Optional[float]) -> dict[str, Any]:
    engine = SharedEngine()
    fleet = ResilientFleet(engine, make_config(capacity, max_queue_size, priority, aging_s))
    latencies: dict[str, list[float]] = {t: [] for t in MIX}
    rejected: dict[str, int] = {t: 0 for t in MIX}
    failed: dict[str, int] = {t: 0 for t in MIX}

    async def one(a: Arrival, started_at: float) -> None:
        await asyncio.sleep(max(0.0, started_at + a.at_s - time.perf_counter()))
        sent = time.perf_counter()
        try:
            await fleet.complete(a.task_type, MIX[a.task_type][0], {"service_s": a.service_s},
                                 fallback_ok=False)
        except RateLimited:
            rejected[a.task_type] += 1
            return
        except HorizonError:
            failed[a.task_type] += 1
            return
        latencies[a.task_type].append(time.perf_counter() - sent)

    started_at = time.perf_counter() + 0.05
    await asyncio.gather(*(one(a, started_at) for a in arrivals))
    assert engine.max_in_flight <= capacity, "admission let more than capacity through"
    return {"latencies": latencies, "rejected": rejected, "failed": failed,
            "max_in_flight": engine.max_in_flight}


def p95(values: list[float]) -> Optional[float]:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[94]


def _ms(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v * 1000, 1)


def _cell(st: dict, digits: int = 0) -> str:
    return "-" if st["median"] != st["median"] else fmt(st, digits)


def run_round(args: argparse.Namespace, round_index: int) -> dict[str, Any]:
    """One round: one arrival schedule, both modes on it, the first mode alternating."""
    seed = args.seed + round_index
    arrivals = schedule(args.seconds, args.load, args.capacity, args.time_scale, seed)
    order = [("fifo", False), ("priority", True)]
    if round_index % 2:
        order.reverse()
    modes = {}
    for mode, priority in order:
        result = asyncio.run(run_mode(arrivals, args.capacity, args.max_queue_size, priority, args.aging_s))
        high = [v for t in HIGH_PRIORITY for v in result["latencies"][t]]
        modes[mode] = {"p95_ms": {t: _ms(p95(result["latencies"][t])) for t in MIX},
                       "served": {t: len(result["latencies"][t]) for t in MIX},
                       "rejected": result["rejected"], "failed": result["failed"],
                       "max_in_flight": result["max_in_flight"],
                       "high_priority_p95_ms": _ms(p95(high))}
    fifo_high, prio_high = modes["fifo"]["high_priority_p95_ms"], modes["priority"]["high_priority_p95_ms"]
    reduction = None if not fifo_high or prio_high is None else round(1 - prio_high / fifo_high, 4)
    return {"round": round_index + 1, "seed": seed, "requests": len(arrivals),
            "order": [m for m, _ in order], "modes": {m: modes[m] for m in ("fifo", "priority")},
            "high_priority_reduction": reduction}


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="arrival window per mode per round")
    ap.add_argument("--load", type=float, default=1.05, help="offered load / line throughput")
    ap.add_argument("--capacity", type=int, default=8, help="engine slots (K2: 8)")
    ap.add_argument("--max-queue-size", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=0.01, help="x SPEC §2 latencies")
    ap.add_argument("--aging-s", type=float, default=None, help="priority aging (off by default)")
    ap.add_argument("--seed", type=int, default=7, help="round r uses seed + r")
    add_rounds_argument(ap, help="rounds over both modes (>= 3)")
    ap.add_argument("--out", "--json", dest="out", type=Path, default=DEFAULT_OUT,
                    help="where the JSON goes")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the 30 %% target is met (median reduction, measurable)")
    args = ap.parse_args(argv)

    rounds = []
    for r in range(args.rounds):
        rounds.append(run_round(args, r))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    def over(mode: str, key: str, task: Optional[str] = None) -> dict:
        values = [rnd["modes"][mode][key] if task is None else rnd["modes"][mode][key][task] for rnd in rounds]
        return stats([float("nan") if v is None else float(v) for v in values])

    summary = {mode: {"p95_ms": {t: over(mode, "p95_ms", t) for t in MIX},
                      "rejected": {t: over(mode, "rejected", t) for t in MIX},
                      "high_priority_p95_ms": over(mode, "high_priority_p95_ms")}
               for mode in ("fifo", "priority")}
    reductions = [rnd["high_priority_reduction"] for rnd in rounds]
    reduction = stats([float("nan") if v is None else v for v in reductions])
    measurable = differs(summary["fifo"]["high_priority_p95_ms"], summary["priority"]["high_priority_p95_ms"])
    met_rounds = sum(1 for v in reductions if v is not None and v >= TARGET_REDUCTION)
    meets = measurable and reduction["median"] >= TARGET_REDUCTION
    if not measurable:
        verdict = "no measurable difference"
    else:
        verdict = (f"{'meets' if meets else 'MISSES'} the >= {TARGET_REDUCTION * 100:.0f} % target on the median "
                   f"({met_rounds}/{len(rounds)} rounds at or above it)")

    info = machine()
    command = shlex.join(["python", "loadtests/bench_priority_inprocess.py", *argv])
    requests = [rnd["requests"] for rnd in rounds]
    print(f"{args.rounds} rounds (seeds {args.seed}..{args.seed + args.rounds - 1}, mode order alternating), "
          f"{min(requests)}–{max(requests)} requests over {args.seconds:g} s per mode per round, load "
          f"{args.load:g}, capacity {args.capacity}, time scale {args.time_scale:g}; latencies in ms, end to "
          f"end incl. queue; median (min–max) over the rounds")
    print(f"machine: {info['cpus']} CPUs, {info['cpu']}; command: `{command}`")
    print()
    print("| class | FIFO p95 ms | priority p95 ms | FIFO 429 | priority 429 |")
    print("|---|---:|---:|---:|---:|")
    fifo, prio = summary["fifo"], summary["priority"]
    for task in MIX:
        print(f"| {task} ({MIX[task][0]}) | {_cell(fifo['p95_ms'][task])} | {_cell(prio['p95_ms'][task])} | "
              f"{_cell(fifo['rejected'][task])} | {_cell(prio['rejected'][task])} |")
    print(f"| **high (chat+vision)** | {_cell(fifo['high_priority_p95_ms'])} | "
          f"{_cell(prio['high_priority_p95_ms'])} | | |")
    print()
    per_round = ", ".join("-" if v is None else f"{v * 100:.0f} %" for v in reductions)
    red = "-" if reduction["median"] != reduction["median"] else (
        f"{reduction['median'] * 100:.0f} % ({reduction['min'] * 100:.0f}–{reduction['max'] * 100:.0f} %)")
    print(f"high-priority p95, priority vs FIFO: reduction per round {per_round} -> {red}: {verdict}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "priority_inprocess", "machine": info, "command": command,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rounds": rounds, "summary": summary,
        "comparison": {"compare": "1 - priority / FIFO high-priority p95",
                       "reduction_per_round": reductions, "reduction": reduction,
                       "measurable": measurable, "target": TARGET_REDUCTION,
                       "rounds_meeting_target": met_rounds, "verdict": verdict}}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if args.check and not meets:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
