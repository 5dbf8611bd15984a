"""How many bare hops Fusion's calls need on this machine's cores, whatever orchestrates them.

Issue 18 asks the looper's total for a zero-latency panel of 3 to stay within 3 bare hops:
three sequential stages (panel, analysis, synthesis), which is the floor when the panel's three
calls take one hop side by side. ``bench_fusion_ray.py`` finds the calls themselves (from a
plain process, no gateway) at 4.5-5 hops on two cores. This benchmark splits that into what the
stages need:

- the **panel** stage's three calls at once cannot end sooner than their CPU (every process
  together: this caller with its gRPC threads, the model replicas, Ray's and Serve's own
  processes) spread over all the machine's cores, nor sooner than one hop;
- each **judge** call waits for the stage before it, so it adds its own wall time.

The **floor** = max(one bare hop, the panel's CPU ÷ cores) + two judge calls, in bare hops of
the same round. Where it is above 3, the target is out of reach on this machine for any
orchestration of these calls; with more cores the panel's CPU spreads wider and the floor
falls towards 3.

Rows, interleaved over ``--rounds`` (>= 3) in a rotating order, each ``--requests`` sequential
runs (after three untimed ones, counted in the CPU and the wall alike):
- ``bare-hop``: a direct deployment-handle call to the zero-latency ``qwen-72b``;
- ``judge``: one judge call (``k2``, a prompt of the judge prompts' size);
- ``panel-3``: the panel's three calls at once;
- ``pattern-3``: the whole pattern, panel then the judge twice (``bench_fusion_ray.bare_pattern``);
- ``idle``: nothing, for as long as the pattern row took: the CPU the cluster spends anyway
  (the controller's loop, the metrics agent), per second, taken out of the other rows.

  .venv/bin/python loadtests/fusion_cpu_floor.py [--rounds 5] [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_fusion_ray import PANELS, bare_pattern, pattern_calls  # noqa: E402
from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.bench_scale import bare_hops  # noqa: E402
from loadtests.cpu_per_request import cpu_by_group  # noqa: E402
from loadtests.lib.rounds import (add_rounds_argument, fmt, fmt_interval, machine, markdown_table,  # noqa: E402
                                  median_interval, rotated, stats, verdict)
from loadtests.lib.serve_cluster import serve_cluster, timed_handle_calls  # noqa: E402

WARMUP = 3  # the untimed calls timed_handle_calls makes first


def cpu_seconds() -> float:
    """User + system CPU of every Ray process and of this one (the caller, all its threads)."""
    import psutil

    own = psutil.Process().cpu_times()
    return sum(cpu_by_group().values()) + own.user + own.system


def measured(run) -> dict:
    before, start = cpu_seconds(), time.perf_counter()
    run()
    wall, cpu = time.perf_counter() - start, cpu_seconds() - before
    return {"wall_s": wall, "cpu_s": cpu}


def floor_in_hops(hop_wall_ms: float, judge_wall_ms: float, panel_cpu_ms: float, cores: int) -> float:
    """The shortest the pattern can take, in bare hops: the panel's calls at once need their CPU
    spread over every core and at least one hop; each of the two judge calls then waits for the
    stage before it."""
    panel = max(hop_wall_ms, panel_cpu_ms / cores)
    return (panel + 2 * judge_wall_ms) / hop_wall_ms


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--requests", type=int, default=200, help="timed runs per row and round")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "fusion_cpu_floor.json"))
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    calls = args.requests + WARMUP
    members = PANELS[3]
    runs: list[dict] = []
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        wait_ready(f"http://127.0.0.1:{port}/horizon")
        panel, judge = pattern_calls("horizon", members)
        rows = {"bare-hop": lambda: bare_hops("horizon", args.requests),
                "judge": lambda: timed_handle_calls(judge, args.requests),
                "panel-3": lambda: timed_handle_calls(panel, args.requests),
                "pattern-3": lambda: bare_pattern("horizon", members, args.requests)}
        timed_handle_calls(panel, 20), timed_handle_calls(judge, 20), bare_hops("horizon", 20)  # warm every handle
        pattern_wall = 1.0
        for rnd in range(1, args.rounds + 1):
            for row in rotated([*rows, "idle"], rnd - 1):
                if row == "idle":
                    r = measured(lambda: time.sleep(pattern_wall))
                else:
                    r = measured(rows[row])
                    if row == "pattern-3":
                        pattern_wall = r["wall_s"]
                runs.append({"round": rnd, "row": row, **r})
                print(f"round {rnd} {row:<10} wall {r['wall_s']:.2f} s  cpu {r['cpu_s']:.2f} s", flush=True)
    by = {(r["round"], r["row"]): r for r in runs}
    rounds = range(1, args.rounds + 1)
    per: dict[str, list[dict]] = {row: [] for row in rows}
    floors, measured_hops = [], []
    for n in rounds:
        idle = by[(n, "idle")]
        background = idle["cpu_s"] / idle["wall_s"]  # CPU-seconds per second the cluster spends anyway
        for row in per:
            r = by[(n, row)]
            cpu = max(r["cpu_s"] - background * r["wall_s"], 0.0)
            per[row].append({"wall_ms": r["wall_s"] / calls * 1000, "cpu_ms": cpu / calls * 1000,
                             "cores_busy": cpu / r["wall_s"], "background_cores": background})
        hop, one_judge, fan_out, pattern = (per[row][-1] for row in ("bare-hop", "judge", "panel-3", "pattern-3"))
        floors.append(floor_in_hops(hop["wall_ms"], one_judge["wall_ms"], fan_out["cpu_ms"], cores))
        measured_hops.append(pattern["wall_ms"] / hop["wall_ms"])
    table = {row: {k: stats([v[k] for v in values]) for k in values[0]} for row, values in per.items()}
    interval = median_interval(floors)
    print(f"\nFusion's call pattern (panel of 3) against the CPU, {args.rounds} rounds of {args.requests} runs "
          f"per row; machine {machine()} ({cores} cores)")
    print(f"command: .venv/bin/python loadtests/fusion_cpu_floor.py --rounds {args.rounds} "
          f"--requests {args.requests}\n")
    print(markdown_table(
        ["row", "wall ms per run", "CPU ms per run, all processes (background taken out)",
         "cores busy meanwhile", "background cores (idle row)"],
        [[row, fmt(table[row]["wall_ms"]), fmt(table[row]["cpu_ms"]), fmt(table[row]["cores_busy"]),
          fmt(table[row]["background_cores"])] for row in per]))
    above = {"not met": "yes", "met": "no"}.get(verdict(interval, "<= 3"), "no measurable difference")
    print(f"\npattern ÷ bare hop, wall (per round): {fmt(stats(measured_hops))}")
    print(f"floor: max(one bare hop, the panel's CPU ÷ {cores} cores) + two judge calls, in bare hops (per round): "
          f"{fmt(stats(floors))}; 95 % interval of the median {fmt_interval(interval, 2)}; above 3 hops: {above}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "cores": cores, "rounds": args.rounds,
                                          "requests": args.requests, "calls_per_row": calls, "runs": runs,
                                          "per_round": per, "table": table, "floor_hops": floors,
                                          "floor_interval_95": interval, "pattern_hops": measured_hops},
                                         indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
