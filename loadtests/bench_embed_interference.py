"""What one long /v1/embeddings request does to routing, which shares the embedder with it.

The router embeds every auto-routed request's text through the same embedding deployment that
serves /v1/embeddings. A long input list used to go to its batch queue as one call, so the
router's calls that arrived meanwhile waited behind every forward pass of the list. Since stop
37 the list goes in pieces of ``embedding.endpoint_chunk_texts`` (64) texts, and a routing call
joins the next piece's batch. Two applications of the simulated profile run side by side, one
per variant:

- ``pieces``: ``endpoint_chunk_texts`` 64 (the default);
- ``pieces16``: 16 (smaller pieces: a shorter wait for routing, more calls for the list);
- ``whole``: ``endpoint_chunk_texts`` larger than the list (the list as one call, as before).

Each round, for each variant in rotating order: ``POST /v1/route`` one request at a time for
``--idle-s`` seconds (routing alone), then one ``/v1/embeddings`` request of ``--texts`` texts
while the routing requests go on, until it answers. Reported per variant: the routing p50
alone, the routing p50 and max while the list is embedded, and the list's own time.

  .venv/bin/python loadtests/bench_embed_interference.py [--rounds 3] [--texts 512]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, markdown_table, rotated, stats  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

VARIANTS = {"pieces": 64, "pieces16": 16, "whole": 1_000_000}
ROUTE_BODY = {"model": "vllm-sr/auto",
              "messages": [{"role": "user", "content": "Write a Python function that merges two sorted lists."}]}


def variant_args(chunk: int) -> dict:
    args = sim_args()
    models = []
    for m in args["models"]:
        if m.get("backend") == "embedding":
            m = {**m, "embedding": {**m.get("embedding", {}), "endpoint_chunk_texts": chunk}}
        models.append(m)
    return {**args, "models": models}


def route_latencies(http, url: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        r = http.post(f"{url}/v1/route", json=ROUTE_BODY)
        r.raise_for_status()
        out.append((time.perf_counter() - start) * 1000)


def one_round(http, url: str, texts: list[str], idle_s: float) -> dict:
    alone: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=route_latencies, args=(http, url, stop, alone))
    prober.start()
    time.sleep(idle_s)
    stop.set()
    prober.join()
    during: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=route_latencies, args=(http, url, stop, during))
    start = time.perf_counter()
    prober.start()
    r = http.post(f"{url}/v1/embeddings", json={"model": "bge-m3", "input": texts})
    embed_s = time.perf_counter() - start
    stop.set()
    prober.join()
    r.raise_for_status()
    assert len(r.json()["data"]) == len(texts)
    return {"route_alone_p50_ms": statistics.median(alone), "route_during_p50_ms": statistics.median(during),
            "route_during_max_ms": max(during), "routes_during": len(during), "embeddings_s": embed_s}


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--texts", type=int, default=512, help="texts in the /v1/embeddings request")
    parser.add_argument("--idle-s", type=float, default=3.0, help="seconds of routing alone per round")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "embed_interference.json"))
    args = parser.parse_args()
    import httpx

    sentence = "The quarterly report covers revenue, costs, hiring and the outlook for each region. "
    texts = [f"Document {i}: " + sentence * 2 for i in range(args.texts)]   # ≈ 40 tokens each
    runs: list[dict] = []
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        for name, chunk in VARIANTS.items():
            serve.run(build_app(variant_args(chunk)), name=name, route_prefix=f"/{name}")
        for name in VARIANTS:
            wait_ready(f"http://127.0.0.1:{port}/{name}")
        with httpx.Client(timeout=120) as http:
            for name in VARIANTS:   # warm-up: each embedder's first long list
                one_round(http, f"http://127.0.0.1:{port}/{name}", texts[:128], 0.5)
            for rnd in range(1, args.rounds + 1):
                for name in rotated(list(VARIANTS), rnd - 1):
                    r = one_round(http, f"http://127.0.0.1:{port}/{name}", texts, args.idle_s)
                    runs.append({"round": rnd, "variant": name, **r})
                    print(f"round {rnd} {name:<7} " + " ".join(f"{k}={v:.1f}" for k, v in r.items()), flush=True)
    rounds = range(1, args.rounds + 1)
    by = {(r["round"], r["variant"]): r for r in runs}
    keys = ["route_alone_p50_ms", "route_during_p50_ms", "route_during_max_ms", "embeddings_s"]
    table = {v: {k: stats([by[(n, v)][k] for n in rounds]) for k in keys} for v in VARIANTS}
    print(f"\nRouting while one /v1/embeddings request of {args.texts} texts runs — {args.rounds} rounds; "
          f"machine {machine()}")
    print(f"command: .venv/bin/python loadtests/bench_embed_interference.py --rounds {args.rounds} "
          f"--texts {args.texts} --idle-s {args.idle_s:g}\n")
    print(markdown_table(
        ["variant", "/v1/route p50 alone, ms", "/v1/route p50 during, ms", "/v1/route max during, ms",
         "the embeddings request, s"],
        [[f"{v} ({'one call' if v == 'whole' else f'{VARIANTS[v]} texts a call'})"]
         + [fmt(table[v][k]) for k in keys] for v in VARIANTS]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "rounds": args.rounds, "texts": args.texts,
                                          "idle_s": args.idle_s, "variants": VARIANTS, "runs": runs,
                                          "table": table}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
