"""Routing decision latency and throughput through ``POST /v1/route`` (fast Serve mode), beside
the encoder's own figures and the in-process router, measured in the same run (issue 17: a
route p50 at 1 in flight within 2x the in-process router's, and decisions/s at 64 in flight at
least 0.4x the encoder's batched throughput).

Deploys the simulated profile (routing needs only the embedding deployment and the router).
Each of ``--rounds`` (>= 3) rounds measures, in an order that rotates from round to round:
- ``encoder-1``: one forward pass of the packaged MiniLM for one short request, in this process
  (one thread per call, as the embedding replica reserves its CPU);
- ``encoder-batched``: texts/s of forward passes over batches of 32;
- ``in-process``: the same router as ``horizon route`` (no Ray), one decision at a time;
- ``http-1``, ``http-16``, ``http-64``: ``POST /v1/route`` at 1, 16 and 64 in flight.
The table gives each row's median and min-max over the rounds; the ratios are computed per
round. ``--variants int8`` deploys the dynamic-int8 encoder instead (one variant per run).

  .venv/bin/python loadtests/bench_routing_http.py [--seconds 6] [--rounds 3] [--variants fp32]
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
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, rotated, stats  # noqa: E402
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


class InProcess:
    """The encoder and the router of the simulated profile, loaded once in this process."""

    def __init__(self, variant: str):
        import asyncio

        import torch

        from deployments.embedding import LocalEmbeddingClient, load_encoder
        from serve_app.config.loader import parse_config
        from serve_app.routing.router import Router

        torch.set_num_threads(1)  # as the embedding replica (num_cpus 1 on the sim profile)
        cfg = parse_config(variant_args(variant))
        self.encoder = load_encoder(cfg.embedding_model)
        self.router = Router(cfg, LocalEmbeddingClient(self.encoder), None)
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.router.start())

    def encoder_single(self, seconds: float) -> dict:
        lat = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            self.encoder.encode([PROMPTS[len(lat) % len(PROMPTS)]])
            lat.append(time.perf_counter() - t)
        return _summary(lat, seconds)

    def encoder_batched(self, seconds: float, batch: int = 32) -> dict:
        texts = [PROMPTS[i % len(PROMPTS)] + f" ({i})" for i in range(batch)]
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            self.encoder.encode(texts)
            done += batch
        elapsed = time.perf_counter() - started
        return {"n": done, "rps": done / elapsed, "p50_ms": float("nan"), "p99_ms": float("nan"), "errors": 0}

    def route(self, seconds: float) -> dict:
        lat = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            body = {"messages": [{"role": "user", "content": PROMPTS[len(lat) % len(PROMPTS)]}]}
            self.loop.run_until_complete(self.router.route(body))
            lat.append(time.perf_counter() - t)
        return _summary(lat, seconds)


def _summary(lat: list[float], seconds: float) -> dict:
    lat = sorted(lat)
    return {"n": len(lat), "rps": len(lat) / seconds, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, "errors": 0}


ROWS = ("encoder-1", "encoder-batched", "in-process", "http-1", "http-16", "http-64")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    add_rounds_argument(parser)
    parser.add_argument("--variants", default="fp32", help="one embedding variant: " + ", ".join(QUANTIZATION))
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "routing_http.json"))
    args = parser.parse_args()
    if args.variants not in QUANTIZATION:
        parser.error(f"unknown variant {args.variants!r}; choose one of {sorted(QUANTIZATION)}")
    variant = args.variants
    runs: list[dict] = []
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        serve.run(build_app(variant_args(variant)), name="horizon", route_prefix="/horizon")
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)
        local = InProcess(variant)

        def measure(row: str) -> dict:
            if row == "encoder-1":
                return local.encoder_single(args.seconds)
            if row == "encoder-batched":
                return local.encoder_batched(args.seconds)
            if row == "in-process":
                return local.route(args.seconds)
            conc = int(row.split("-")[1])
            body = {"model": "vllm-sr/auto", "messages": [{"role": "user", "content": PROMPTS[conc % 4]}]}
            return load(f"{url}/v1/route", conc, args.seconds, body)

        measure("http-16")  # warm-up: the first requests through a fresh proxy and ingress
        for rnd in range(args.rounds):
            order = rotated(ROWS, rnd)
            for row in order:
                r = measure(row)
                runs.append({"round": rnd + 1, "row": row, **r})
                print(f"round {rnd + 1} {row:<16} p50={r['p50_ms']:.2f}ms p99={r['p99_ms']:.2f}ms "
                      f"rps={r['rps']:.1f} errors={r['errors']}", flush=True)
        serve.delete("horizon")
    by = {(r["round"], r["row"]): r for r in runs}
    rounds = range(1, args.rounds + 1)
    p50_ratio = [by[(n, "http-1")]["p50_ms"] / by[(n, "in-process")]["p50_ms"] for n in rounds]
    rps_ratio = [by[(n, "http-64")]["rps"] / by[(n, "encoder-batched")]["rps"] for n in rounds]
    table = {row: {k: stats([by[(n, row)][k] for n in rounds]) for k in ("p50_ms", "p99_ms", "rps")} for row in ROWS}
    print(f"\nRouting over HTTP — {variant} encoder; {args.rounds} rounds of {args.seconds:g} s per row; "
          f"machine {machine()}")
    print(f"command: .venv/bin/python loadtests/bench_routing_http.py --seconds {args.seconds:g} "
          f"--rounds {args.rounds} --variants {variant}\n")
    print("| row | p50 ms | p99 ms | per s |")
    print("|---|---|---|---|")
    for row in ROWS:
        t = table[row]
        lat = "–" if row == "encoder-batched" else fmt(t["p50_ms"])
        tail = "–" if row == "encoder-batched" else fmt(t["p99_ms"])
        print(f"| {row} | {lat} | {tail} | {fmt(t['rps'], 1)} |")
    print(f"\n/v1/route p50 at 1 in flight ÷ in-process router p50: {fmt(stats(p50_ratio))} (target <= 2)")
    print(f"/v1/route decisions/s at 64 in flight ÷ encoder batched texts/s: {fmt(stats(rps_ratio))} "
          f"(target >= 0.4 on a slower machine; >= 250 decisions/s on a quiet one)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "variant": variant, "seconds": args.seconds, "rounds": args.rounds, "machine": machine(),
        "runs": runs, "table": table, "p50_ratio_per_round": p50_ratio, "p50_ratio": stats(p50_ratio),
        "rps_ratio_per_round": rps_ratio, "rps_ratio": stats(rps_ratio)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
