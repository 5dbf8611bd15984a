"""Fusion orchestration overhead through the real Ray Serve graph (simulated fleet, zero latency).

overhead = looper total − (slowest panel member + every judge call), where each sub-call's
latency is measured where the looper sees it: the deployment-handle round trip included. So the
overhead is the looper's own cost (policy, prompts, JSON parsing, trace) on top of the hops;
the per-hop cost (a zero-latency model call through its handle and resilience guard) is reported
beside it. Panel sizes 2, 3 and 5; target p50 <= 5 ms.

  .venv/bin/python loadtests/bench_fusion_ray.py [--requests 60]
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
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

PANELS = {2: ["qwen-72b", "coder"], 3: ["qwen-72b", "coder", "r1-distill"],
          5: ["qwen-72b", "coder", "r1-distill", "k2", "minicpm-v"]}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "fusion_ray.json"))
    args = parser.parse_args()
    import httpx
    from ray import serve

    from serve_app.app import build_app

    rows = []
    with serve_cluster() as port:
        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)
        with httpx.Client(timeout=60) as http:
            for size, panel in PANELS.items():
                body = {"model": "vllm-sr/fusion", "max_tokens": 16,
                        "messages": [{"role": "user", "content": "Compare two sorting algorithms."}],
                        "plugins": [{"id": "fusion", "model": "k2", "analysis_models": panel}]}
                totals, overheads, hops = [], [], []
                for i in range(args.requests + 5):
                    r = http.post(f"{url}/v1/chat/completions", json=body)
                    r.raise_for_status()
                    trace = r.json()["fusion"]
                    members = [m["latency_ms"] for m in trace["responses"]]
                    judges = [c["latency_ms"] for c in trace["judge_calls"]]
                    if i < 5:
                        continue  # warm-up
                    total = trace["timings_ms"]["total"]
                    totals.append(total)
                    overheads.append(total - (max(members) + sum(judges)))
                    hops.extend(members + judges)
                row = {"panel_size": size, "total_p50_ms": statistics.median(totals),
                       "overhead_p50_ms": statistics.median(overheads),
                       "overhead_p95_ms": pct(overheads, 0.95), "hop_p50_ms": statistics.median(hops)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| panel | looper total p50 ms | orchestration overhead p50 ms | p95 ms | per-hop p50 ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['panel_size']} | {r['total_p50_ms']:.2f} | {r['overhead_p50_ms']:.2f} | "
              f"{r['overhead_p95_ms']:.2f} | {r['hop_p50_ms']:.2f} |")
    print("\ntarget: overhead p50 <= 5 ms")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
