"""Fusion through the real Ray Serve graph (one simulated fleet, zero latency), against one bare
hop measured in the same run (issue 18: the looper's total for a panel of 3 within 3 bare hops:
panel, analysis and synthesis are three sequential stages, so that is the floor).

Each of ``--rounds`` (>= 3) rounds measures, in an order that rotates from round to round:
- one bare hop: a direct deployment-handle call from this process to a zero-latency model;
- the looper's total (``fusion.timings_ms.total``) for panels of 2, 3 and 5 members, and its
  orchestration overhead = total − (slowest panel member + every judge call), each sub-call
  measured where the looper sees it (handle round trip and resilience guard included);
- the same calls without the gateway: from this process, the panel's members called at once
  through their deployment handles, then two sequential calls to the judge's (``pattern-N``).
  Three sequential hops are the floor only where the panel's calls run side by side; this row
  measures what the call pattern itself costs on the machine, so total ÷ pattern is what the
  gateway (looper, guards, the ingress's event loop) adds to it.
The tables give each row's median and min-max over the rounds; ratios are computed per round.

  .venv/bin/python loadtests/bench_fusion_ray.py [--rounds 3] [--requests 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.bench_scale import bare_hops, fusion_traces  # noqa: E402
from loadtests.lib.rounds import (add_rounds_argument, fmt, fmt_interval, machine, median_interval,  # noqa: E402
                                  rotated, stats, verdict)
from loadtests.lib.serve_cluster import serve_cluster, timed_handle_calls  # noqa: E402

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


JUDGE = "k2"
PANEL_PROMPT = "Compare two sorting algorithms."
# About the size of the judge prompts the looper builds for these panels (≈ 250-320 tokens).
JUDGE_PROMPT = "Compare the answers below and say where they agree. " * 24


def bare_pattern(app: str, members: list[str], requests: int) -> list[float]:
    """Fusion's call pattern from this process, no gateway: ``members`` at once, then the judge
    twice (analysis, synthesis), each a plain deployment-handle call; ms per run."""
    from ray import serve

    from serve_app.fleet.names import deployment_name

    handles = {m: serve.get_deployment_handle(deployment_name(m), app_name=app) for m in {*members, JUDGE}}

    def body(model: str, prompt: str) -> dict:
        return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 16}

    async def fusion_pattern() -> None:
        await asyncio.gather(*(handles[m].chat.remote(body(m, PANEL_PROMPT)) for m in members))
        for _ in ("analysis", "synthesis"):
            await handles[JUDGE].chat.remote(body(JUDGE, JUDGE_PROMPT))

    return timed_handle_calls(fusion_pattern, requests)


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "fusion_ray.json"))
    args = parser.parse_args()
    import httpx
    runs: list[dict] = []
    rows = ["bare-hop"] + [f"{kind}-{n}" for n in PANELS for kind in ("panel", "pattern")]
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)
        with httpx.Client(timeout=60) as http:
            for rnd in range(1, args.rounds + 1):
                for row in rotated(rows, rnd - 1):
                    if row == "bare-hop":
                        r = {"total_p50_ms": statistics.median(bare_hops("horizon", args.requests))}
                    elif row.startswith("pattern-"):
                        members = PANELS[int(row.split("-")[1])]
                        r = {"total_p50_ms": statistics.median(bare_pattern("horizon", members, args.requests))}
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

    def per_round_values(row: str, base: str) -> list[float]:
        return [by[(r, row)]["total_p50_ms"] / by[(r, base)]["total_p50_ms"] for r in rounds]

    def per_round(row: str, base: str) -> dict:
        return stats(per_round_values(row, base))

    ratios = {f"panel-{n}": per_round(f"panel-{n}", "bare-hop") for n in PANELS}
    pattern_hops = {f"pattern-{n}": per_round(f"pattern-{n}", "bare-hop") for n in PANELS}
    over_pattern = {f"panel-{n}": per_round(f"panel-{n}", f"pattern-{n}") for n in PANELS}
    print(f"\nFusion through Ray Serve — {args.rounds} rounds of {args.requests} requests per row; machine {machine()}")
    print(f"command: .venv/bin/python loadtests/bench_fusion_ray.py --rounds {args.rounds} --requests {args.requests}\n")
    print(f"bare hop (direct handle call, zero-latency deployment) p50: {fmt(table['bare-hop']['total_p50_ms'])} ms\n")
    print("| panel | looper total p50 ms | total ÷ bare hop (per round) | same calls without the gateway p50 ms | "
          "same calls ÷ bare hop | total ÷ same calls | orchestration overhead p50 ms | "
          "sub-call p50 ms as the looper sees it |")
    print("|---|---|---|---|---|---|---|---|")
    for n in PANELS:
        t = table[f"panel-{n}"]
        print(f"| {n} | {fmt(t['total_p50_ms'])} | {fmt(ratios[f'panel-{n}'])} | "
              f"{fmt(table[f'pattern-{n}']['total_p50_ms'])} | {fmt(pattern_hops[f'pattern-{n}'])} | "
              f"{fmt(over_pattern[f'panel-{n}'])} | {fmt(t['overhead_p50_ms'])} | {fmt(t['looper_hop_p50_ms'])} |")
    interval = median_interval(per_round_values("panel-3", "bare-hop"))
    target = {"target": "panel of 3 <= 3 bare hops", "interval_95": interval, "verdict": verdict(interval, "<= 3")}
    print(f"\ntarget: panel of 3 <= 3 bare hops; 95 % interval of the median "
          f"{fmt_interval(interval, 2)}: {target['verdict']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "rounds": args.rounds, "requests": args.requests,
                                          "runs": runs, "table": table, "ratio_to_bare_hop": ratios,
                                          "pattern_ratio_to_bare_hop": pattern_hops,
                                          "ratio_to_same_calls": over_pattern, "target": target}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
