"""What one read of the deployment states costs the process that makes it (the ingress's
``DeploymentBoard``, every 2 s while a deployment is not up or requests wait, every 20 s
otherwise): ``serve.status()`` against the controller's details dict that the board reads now.

``serve.status()`` validates the details into Serve's config models, and that validation
cloudpickles every deployment's request-router class and autoscaling policy; in the ingress the
GIL is held meanwhile, so every request in flight waits for it. The two reads alternate over
``--rounds`` rounds of ``--reads`` reads each against the simulated fleet (configs/sim.yaml),
from this process; CPU time (``time.process_time``) and wall time per read, median (min-max)
over the rounds' medians. Writes ``loadtests/results/status_read.json``.

  .venv/bin/python loadtests/bench_status_read.py [--rounds 3] [--reads 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, rotated, stats  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--reads", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "status_read.json"))
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {"serve.status()": [], "details dict (the board)": []}
    with serve_cluster() as port:
        from ray import serve

        from serve_app.app import build_app
        from serve_app.fleet.availability import read_serve_status

        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        wait_ready(f"http://127.0.0.1:{port}/horizon")
        reads = {"serve.status()": lambda: serve.status().applications["horizon"].deployments,
                 "details dict (the board)": lambda: read_serve_status("horizon")}
        assert len(reads["serve.status()"]()) == len(reads["details dict (the board)"]())
        for r in range(args.rounds):
            for name in rotated(list(reads), r):
                cpu, wall = [], []
                for _ in range(args.reads):
                    c, w = time.process_time(), time.perf_counter()
                    reads[name]()
                    cpu.append((time.process_time() - c) * 1000)
                    wall.append((time.perf_counter() - w) * 1000)
                rows[name].append({"cpu_ms": statistics.median(cpu), "wall_ms": statistics.median(wall)})
                print(f"round {r}: {name}: cpu {rows[name][-1]['cpu_ms']:.1f} ms, wall "
                      f"{rows[name][-1]['wall_ms']:.1f} ms per read", flush=True)
    command = "  ".join(["", *sys.argv]).strip()
    print(f"\nmachine: {machine()}; command: .venv/bin/python {command}\n")
    print("| read | CPU ms per read | wall ms per read |\n|---|---|---|")
    summary = {}
    for name, runs in rows.items():
        summary[name] = {k: stats([run[k] for run in runs]) for k in ("cpu_ms", "wall_ms")}
        print(f"| {name} | {fmt(summary[name]['cpu_ms'], 1)} | {fmt(summary[name]['wall_ms'], 1)} |")
    ratio = stats([a["cpu_ms"] / b["cpu_ms"] for a, b in zip(rows["serve.status()"],
                                                           rows["details dict (the board)"])])
    print(f"\nserve.status() / details dict, CPU per read (per round): {fmt(ratio, 1)}")
    Path(args.out).write_text(json.dumps({"machine": machine(), "command": sys.argv, "reads": args.reads,
                                          "rounds": rows, "summary": summary, "cpu_ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
