"""Priority admission vs plain FIFO under saturation, in process (no Ray, no engines).

What it measures: the seed's claim (SPEC §6) that ordering the waiting line by priority class
(vision and simple chat first, code and deep reasoning later) cuts the high-priority P95 by
about 30 %. Both modes run the same arrival schedule through :class:`ResilientFleet` into one
saturated engine line, one after the other, and the table shows them side by side.

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

Run: ``python loadtests/bench_priority_inprocess.py [--seconds 15] [--load 1.05]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v * 1000:8.0f}"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="arrival window per mode")
    ap.add_argument("--load", type=float, default=1.05, help="offered load / line throughput")
    ap.add_argument("--capacity", type=int, default=8, help="engine slots (K2: 8)")
    ap.add_argument("--max-queue-size", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=0.01, help="x SPEC §2 latencies")
    ap.add_argument("--aging-s", type=float, default=None, help="priority aging (off by default)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the 30 %% target is met")
    args = ap.parse_args(argv)

    arrivals = schedule(args.seconds, args.load, args.capacity, args.time_scale, args.seed)
    results = {}
    for mode, priority in (("fifo", False), ("priority", True)):
        results[mode] = asyncio.run(run_mode(arrivals, args.capacity, args.max_queue_size,
                                             priority, args.aging_s))

    def high(mode: str) -> list[float]:
        return [v for t in HIGH_PRIORITY for v in results[mode]["latencies"][t]]

    print(f"{len(arrivals)} requests over {args.seconds:g} s, load {args.load:g}, capacity "
          f"{args.capacity}, time scale {args.time_scale:g} (latencies in ms, end to end incl. queue)")
    print(f"{'class':<22}{'FIFO p95':>10}{'prio p95':>10}{'FIFO 429':>10}{'prio 429':>10}")
    for task in MIX:
        fifo, prio = results["fifo"], results["priority"]
        print(f"{task + ' (' + MIX[task][0] + ')':<22}{_ms(p95(fifo['latencies'][task])):>10}"
              f"{_ms(p95(prio['latencies'][task])):>10}{fifo['rejected'][task]:>10}{prio['rejected'][task]:>10}")
    fifo_high, prio_high = p95(high("fifo")), p95(high("priority"))
    reduction = None if not fifo_high or prio_high is None else 1 - prio_high / fifo_high
    print(f"{'HIGH (chat+vision)':<22}{_ms(fifo_high):>10}{_ms(prio_high):>10}")
    if reduction is not None:
        verdict = "meets" if reduction >= 0.30 else "MISSES"
        print(f"high-priority p95: {reduction * 100:.0f} % lower with priority admission "
              f"({verdict} the >= 30 % target)")
    if args.json:
        summary = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "requests": len(arrivals),
                   "p95_ms": {mode: {t: (None if p95(r["latencies"][t]) is None else round(p95(r["latencies"][t]) * 1000, 1))
                                     for t in MIX} for mode, r in results.items()},
                   "rejected": {mode: r["rejected"] for mode, r in results.items()},
                   "high_priority_p95_ms": {"fifo": None if fifo_high is None else round(fifo_high * 1000, 1),
                                            "priority": None if prio_high is None else round(prio_high * 1000, 1)},
                   "reduction": None if reduction is None else round(reduction, 3)}
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    if args.check and (reduction is None or reduction < 0.30):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
