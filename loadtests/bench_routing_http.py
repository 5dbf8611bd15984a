"""Routing decision latency and throughput through ``POST /v1/route`` (fast Serve mode).

Deploys the simulated profile (routing needs only the embedding deployment and the router)
and measures, over HTTP on 127.0.0.1: p50/p99 at 1 request in flight and req/s at saturation
(16 and 64 in flight; the embedding deployment batches concurrent requests). Each embedding
variant (``--variants``: the shipped fp32 encoder and ``embedding.quantization: dynamic_int8``)
is deployed in turn on the same cluster, so the table compares them side by side. Prints the
in-process rate of the same router beside it (``horizon route``'s path, no Ray).

  .venv/bin/python loadtests/bench_routing_http.py [--seconds 8] [--variants fp32,int8]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import load, sim_args, wait_ready  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

# A realistic mix of prompts; each request sends one (the router embeds the last user text).
PROMPTS = [
    "Write a Python function that merges two sorted lists.",
    "Prove that the sum of two even numbers is even.",
    "Summarise this paragraph in two sentences: the quarterly results beat expectations.",
    "What's a good name for a golden retriever puppy?",
]


QUANTIZATION = {"fp32": "none", "int8": "dynamic_int8"}


def variant_args(variant: str) -> dict:
    """The simulated profile with the embedding model's ``quantization`` set for ``variant``."""
    args = sim_args()
    models = []
    for m in args["models"]:
        if m.get("backend") == "embedding":
            m = {**m, "embedding": {**m.get("embedding", {}), "quantization": QUANTIZATION[variant]}}
        models.append(m)
    return {**args, "models": models}


def in_process_rate(seconds: float) -> dict:
    import asyncio

    from deployments.embedding import LocalEmbeddingClient, load_encoder
    from serve_app.config.loader import load_config
    from serve_app.routing.router import Router

    cfg = load_config(ROOT / "configs" / "sim.yaml")
    router = Router(cfg, LocalEmbeddingClient(load_encoder(cfg.embedding_model)), None)

    async def run() -> dict:
        await router.start()
        lat = []
        deadline = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            await router.route({"messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]})
            lat.append(time.perf_counter() - t)
            i += 1
        lat.sort()
        return {"n": len(lat), "rps": len(lat) / seconds, "p50_ms": lat[len(lat) // 2] * 1000}

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--variants", default="fp32,int8",
                        help="comma-separated embedding variants: " + ", ".join(QUANTIZATION))
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "routing_http.json"))
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in QUANTIZATION]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {sorted(QUANTIZATION)}")
    from ray import serve

    from serve_app.app import build_app

    rows = []
    with serve_cluster() as port:
        for variant in variants:
            serve.run(build_app(variant_args(variant)), name="horizon", route_prefix="/horizon")
            url = f"http://127.0.0.1:{port}/horizon"
            wait_ready(url)
            for conc in (1, 16, 64):
                body = {"model": "vllm-sr/auto", "messages": [{"role": "user", "content": PROMPTS[conc % 4]}]}
                r = load(f"{url}/v1/route", conc, args.seconds, body)
                rows.append({"variant": variant, "concurrency": conc, **r})
                print(f"{variant} /v1/route c={conc:<3d} p50={r['p50_ms']:.2f}ms p99={r['p99_ms']:.2f}ms "
                      f"rps={r['rps']:.0f} errors={r['errors']}", flush=True)
            serve.delete("horizon")
    local = in_process_rate(args.seconds)
    print("\n| path | embedding | in flight | p50 ms | p99 ms | decisions/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| POST /v1/route | {r['variant']} | {r['concurrency']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['rps']:.0f} |")
    print(f"| in-process Router (horizon route) | fp32 | 1 | {local['p50_ms']:.2f} | – | {local['rps']:.0f} |")
    by = {(r["variant"], r["concurrency"]): r for r in rows}
    if ("fp32", 1) in by and ("int8", 1) in by:
        print(f"\nint8 / fp32: p50 at 1 in flight {by[('int8', 1)]['p50_ms'] / by[('fp32', 1)]['p50_ms']:.2f}, "
              f"decisions/s at 64 in flight {by[('int8', 64)]['rps'] / by[('fp32', 64)]['rps']:.2f}")
    print(f"\ntargets: p50 <= 15 ms at 1 in flight; >= 200 decisions/s at saturation")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"http": rows, "in_process": local}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
