"""What Ray's task events cost the GCS for an actor called several times a second, forever: the
gateway's breaker registry (4 calls/s per ingress replica) and demand board (2 reports/s per
ingress replica, plus a read per autoscaling poll per model replica) are such actors.

One local Ray cluster, two actors of the same trivial class: one created with task events
(Ray's default), one with ``enable_task_events=False`` (as the gateway creates its actors). A
caller actor calls one of them ``--rate`` times a second for ``--seconds``; the phases alternate
over ``--rounds`` rounds (order rotating). The GCS server's proportional memory (PSS) is read
before and after each phase: its growth per 1,000 calls and per minute, median (min-max).
Writes ``loadtests/results/task_events.json``.

  .venv/bin/python loadtests/bench_task_events.py [--rounds 3] [--seconds 60] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import add_rounds_argument, fmt, machine, rotated, stats  # noqa: E402


def gcs_pss_mib() -> float:
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        if "gcs_server" in " ".join(proc.info.get("cmdline") or []):
            for line in Path(f"/proc/{proc.info['pid']}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    raise LookupError("no gcs_server process")


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=20.0, help="calls a second")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "task_events.json"))
    args = parser.parse_args()
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)

    class Registry:
        def sync(self, events: list) -> dict:
            return {"k2": "closed", "qwen-72b": "closed"}

    @ray.remote(num_cpus=0)
    class Caller:
        async def run(self, target, seconds: float, rate: float) -> int:
            calls, end = 0, time.monotonic() + seconds
            while time.monotonic() < end:
                await target.sync.remote([("k2", True)] * 3)
                calls += 1
                await asyncio.sleep(1 / rate)
            return calls

    actors = {"task events on (Ray's default)": ray.remote(Registry).options(num_cpus=0).remote(),
              "task events off (the gateway's actors)":
                  ray.remote(Registry).options(num_cpus=0, enable_task_events=False).remote()}
    caller = Caller.remote()
    ray.get([a.sync.remote([]) for a in actors.values()])
    rows: dict[str, list[dict]] = {name: [] for name in actors}
    try:
        for r in range(args.rounds):
            for name in rotated(list(actors), r):
                before, started = gcs_pss_mib(), time.monotonic()
                calls = ray.get(caller.run.remote(actors[name], args.seconds, args.rate))
                time.sleep(2)   # the last events reach the GCS (flushed every second)
                grown = gcs_pss_mib() - before
                minutes = (time.monotonic() - started) / 60
                rows[name].append({"calls": calls, "gcs_growth_mib": grown,
                                   "kib_per_1000_calls": grown * 1024 / calls * 1000,
                                   "mib_per_min": grown / minutes})
                print(f"round {r}: {name}: {calls} calls, GCS +{grown:.2f} MiB", flush=True)
    finally:
        ray.shutdown()
    print(f"\nmachine: {machine()}; command: .venv/bin/python {' '.join(sys.argv)}\n")
    print("| actor | GCS growth, KiB per 1,000 calls | GCS growth, MiB/min at "
          f"{args.rate:g} calls/s |\n|---|---|---|")
    summary = {}
    for name, runs in rows.items():
        summary[name] = {k: stats([run[k] for run in runs]) for k in ("kib_per_1000_calls", "mib_per_min")}
        print(f"| {name} | {fmt(summary[name]['kib_per_1000_calls'], 0)} | {fmt(summary[name]['mib_per_min'])} |")
    Path(args.out).write_text(json.dumps({"machine": machine(), "command": sys.argv, "rate": args.rate,
                                          "seconds": args.seconds, "rounds": rows, "summary": summary},
                                         indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
