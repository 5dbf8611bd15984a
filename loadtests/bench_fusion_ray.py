"""Fusion through the real Ray Serve graph (one simulated fleet, zero latency), against one bare
hop measured in the same run (issue 18: the looper's total for a panel of 3 within 3 bare hops:
panel, analysis and synthesis are three sequential stages, so that is the floor).

Each of ``--rounds`` (>= 3) rounds measures, in an order that rotates from round to round:
- one bare hop: a direct deployment-handle call from this process to a zero-latency model;
- the looper's total (``fusion.timings_ms.total``) for panels of 2, 3 and 5 members, and its
  orchestration overhead = total − (slowest panel member + every judge call), each sub-call
  measured where the looper sees it (handle round trip and resilience guard included).
The tables give each row's median and min-max over the rounds; ratios are computed per round.

  .venv/bin/python loadtests/bench_fusion_ray.py [--rounds 3] [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.bench_scale import bare_hops, fusion_traces  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, rotated, stats  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

PANELS = {2: ["qwen-72b", "coder"], 3: ["qwen-72b", "coder", "r1-distill"],
          5: ["qwen-72b", "coder", "r1-distill", "k2", "minicpm-v"]}


def panel_run(http, url: str, members: list[str], requests: int) -> dict:
    totals, overheads, hops = [], [], []
    for trace in fusion_traces(http, url, members, requests):
        members_ms = [m["latency_ms"] for m in trace["responses"]]
        judges_ms = [c["latency_ms"] for c in trace["judge_calls"]]
        total = trace["timings_ms"]["total"]
        totals.append(total)
        overheads.append(total - (max(members_ms) + sum(judges_ms)))
        hops.extend(members_ms + judges_ms)
    return {"total_p50_ms": statistics.median(totals), "overhead_p50_ms": statistics.median(overheads),
            "looper_hop_p50_ms": statistics.median(hops)}


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "fusion_ray.json"))
    args = parser.parse_args()
    import httpx
    from ray import serve

    from serve_app.app import build_app

    runs: list[dict] = []
    rows = ["bare-hop"] + [f"panel-{n}" for n in PANELS]
    with serve_cluster() as port:
        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)
        with httpx.Client(timeout=60) as http:
            for rnd in range(1, args.rounds + 1):
                for row in rotated(rows, rnd - 1):
                    if row == "bare-hop":
                        r = {"total_p50_ms": statistics.median(bare_hops("horizon", args.requests))}
                    else:
                        r = panel_run(http, url, PANELS[int(row.split("-")[1])], args.requests)
                    runs.append({"round": rnd, "row": row, **r})
                    print(f"round {rnd} {row:<9} " + " ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
    by = {(r["round"], r["row"]): r for r in runs}
    rounds = range(1, args.rounds + 1)
    table = {}
    for row in rows:
        keys = [k for k in by[(1, row)] if k.endswith("_ms")]
        table[row] = {k: stats([by[(n, row)][k] for n in rounds]) for k in keys}
    ratios = {f"panel-{n}": stats([by[(r, f'panel-{n}')]["total_p50_ms"] / by[(r, 'bare-hop')]["total_p50_ms"]
                                   for r in rounds]) for n in PANELS}
    print(f"\nFusion through Ray Serve — {args.rounds} rounds of {args.requests} requests per row; machine {machine()}")
    print(f"command: .venv/bin/python loadtests/bench_fusion_ray.py --rounds {args.rounds} --requests {args.requests}\n")
    print(f"bare hop (direct handle call, zero-latency deployment) p50: {fmt(table['bare-hop']['total_p50_ms'])} ms\n")
    print("| panel | looper total p50 ms | total ÷ bare hop (per round) | orchestration overhead p50 ms | sub-call p50 ms as the looper sees it |")
    print("|---|---|---|---|---|")
    for n in PANELS:
        t = table[f"panel-{n}"]
        print(f"| {n} | {fmt(t['total_p50_ms'])} | {fmt(ratios[f'panel-{n}'])} | {fmt(t['overhead_p50_ms'])} | "
              f"{fmt(t['looper_hop_p50_ms'])} |")
    print("\ntarget: panel of 3 <= 3 bare hops")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "rounds": args.rounds, "requests": args.requests,
                                          "runs": runs, "table": table, "ratio_to_bare_hop": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
