"""Gateway overhead benchmark (issue: serving foundation), side by side in one run.

Variants, all over HTTP on 127.0.0.1 with the same chat body:
  (a) mock     — a FastAPI/uvicorn OpenAI mock that answers at once, called directly;
  (b) bare     — the bare two-hop Ray Serve baseline: FastAPI ingress → handle → zero-latency
                 deployment, no logic;
  (c) horizon  — this project's ingress (validation, resilience guard, headers) in front of the
                 zero-latency simulated deployment (direct alias, so routing is not measured).
Each at 1, 16 and 64 requests in flight: p50, p99, req/s. Serve runs in the mode chosen by the
environment (``horizon``'s default is the fast mode; ``--default-mode`` measures Serve's defaults).

Real-engine path (``--engine``): output tokens/s of a real vLLM engine (configs/local.yaml)
through the ingress vs calling the vLLM deployment's handle directly, same concurrency.

  .venv/bin/python loadtests/bench_gateway.py [--seconds 8] [--engine] [--default-mode]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi import FastAPI, Request

from loadtests.lib.serve_cluster import free_port, serve_cluster

BODY = {"model": "qwen-72b", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}


MOCK_SERVER = r'''
import sys, time, uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.post("/v1/chat/completions")
async def chat(body: dict):
    return {"id": "mock", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''


def load(url: str, concurrency: int, seconds: float, body: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "loadtests.lib.httpload", url, str(concurrency),
                          str(seconds), json.dumps(body)], capture_output=True, text=True, cwd=ROOT,
                         timeout=seconds + 120)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def deploy_bare(serve) -> None:
    # (Request is imported at module level: with postponed annotations FastAPI resolves the
    # endpoint's annotation against module globals.)
    app = FastAPI()

    @serve.deployment(name="zero", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
    class Zero:
        async def chat(self, body: dict) -> dict:
            return {"id": "zero", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    @serve.deployment(name="bare-ingress", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
    @serve.ingress(app)
    class BareIngress:
        def __init__(self, zero):
            self.zero = zero

        @app.post("/v1/chat/completions")
        async def chat(self, request: Request):
            return await self.zero.chat.remote(await request.json())

    serve.run(BareIngress.bind(Zero.bind()), name="bare", route_prefix="/bare")


def sim_args() -> dict:
    from serve_app.config.loader import horizon_args, read_document

    args = dict(horizon_args(read_document(ROOT / "configs" / "sim.yaml")))
    args["simulation"] = {"latency_scale": 0.0}
    models = []
    for m in args["models"]:
        m = dict(m)
        if m.get("backend") == "simulated":
            m["simulated"] = {**m.get("simulated", {}), "output_tokens": 4, "max_num_seqs": 1024}
            m["scaling"] = {**m.get("scaling", {}), "max_ongoing_requests": 1024, "max_queued_requests": -1}
        models.append(m)
    args["models"] = models
    args["global"] = {**args.get("global", {}), "server": {"max_ongoing_requests": 1024}}
    # Zero latency everywhere: admission must not be the bottleneck being measured.
    res = dict(args.get("resilience", {}))
    res.pop("admission", None)
    args["resilience"] = res
    return args


def wait_ready(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", timeout=30)
            if r.status_code == 200 and r.json().get("status") == "ready":
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(url)


async def engine_tokens_per_s(handle_call, concurrency: int, requests: int) -> float:
    counts: list[int] = []
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            counts.append(await handle_call(i))

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    return sum(counts) / (time.perf_counter() - start)


def run_engine(serve, port: int, concurrency: int, requests: int, max_tokens: int) -> dict:
    import httpx
    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    from serve_app.app import build_app
    from serve_app.config.loader import horizon_args, read_document

    args = dict(horizon_args(read_document(ROOT / "configs" / "local.yaml")))
    serve.run(build_app(args), name="local", route_prefix="/local")
    url = f"http://127.0.0.1:{port}/local"
    wait_ready(url)
    body = lambda i: {"model": "k2", "max_tokens": max_tokens, "temperature": 0,  # noqa: E731
                      "ignore_eos": True,
                      "messages": [{"role": "user", "content": f"Tell me a long story number {i}."}]}

    async def via_ingress(i: int) -> int:
        async with httpx.AsyncClient(timeout=300) as c:
            r = await c.post(f"{url}/v1/chat/completions", json=body(i))
            return r.json()["usage"]["completion_tokens"]

    handle = serve.get_deployment_handle("model-k2", app_name="local")

    async def direct(i: int) -> int:
        req = ChatCompletionRequest(**{**body(i), "stream": False})
        async for item in handle.options(stream=True).chat.remote(req):
            return item.usage.completion_tokens
        return 0

    async def all_phases() -> dict[str, float]:
        # One event loop for every phase: the driver's handle is bound to the loop it first ran on.
        # Warm both paths first (the first requests through a path pay one-off set-up costs).
        await engine_tokens_per_s(direct, concurrency, concurrency)
        await engine_tokens_per_s(via_ingress, concurrency, concurrency)
        out = {}
        for name, call in (("direct", direct), ("ingress", via_ingress),
                           ("direct#2", direct), ("ingress#2", via_ingress)):
            out[name] = await engine_tokens_per_s(call, concurrency, requests)
            print(f"  engine phase {name}: {out[name]:.1f} output tok/s", flush=True)
        return out

    results = asyncio.run(all_phases())
    d = (results["direct"] + results["direct#2"]) / 2
    g = (results["ingress"] + results["ingress#2"]) / 2
    return {"direct_tok_s": d, "ingress_tok_s": g, "ratio": g / d, "runs": results}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--engine", action="store_true", help="also measure the real vLLM path")
    parser.add_argument("--engine-only", action="store_true", help="only the real vLLM path")
    parser.add_argument("--default-mode", action="store_true", help="Ray Serve defaults, not fast mode")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "gateway.json"))
    args = parser.parse_args()
    rows = []
    with serve_cluster(fast=not args.default_mode) as port:
        engine = _run_variants(args, port, rows)
    _report(args, rows, engine)
    return 0


def _run_variants(args, port: int, rows: list) -> dict | None:
    from ray import serve

    from serve_app.app import build_app

    mock_port = free_port()
    mock = subprocess.Popen([sys.executable, "-c", MOCK_SERVER, str(mock_port)])
    try:
        if args.engine_only:
            return run_engine(serve, port, concurrency=4, requests=16, max_tokens=64)
        deploy_bare(serve)
        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        wait_ready(f"http://127.0.0.1:{port}/horizon")
        time.sleep(2)
        targets = {"mock": f"http://127.0.0.1:{mock_port}/v1/chat/completions",
                   "bare": f"http://127.0.0.1:{port}/bare/v1/chat/completions",
                   "horizon": f"http://127.0.0.1:{port}/horizon/v1/chat/completions"}
        for conc in [int(c) for c in args.concurrency.split(",")]:
            for name, url in targets.items():
                r = load(url, conc, args.seconds, BODY)
                rows.append({"variant": name, "concurrency": conc, **r})
                print(f"{name:8s} c={conc:<3d} p50={r['p50_ms']:.2f}ms p99={r['p99_ms']:.2f}ms "
                      f"rps={r['rps']:.0f} errors={r['errors']}", flush=True)
        engine = None
        if args.engine:
            serve.delete("horizon")
            serve.delete("bare")
            engine = run_engine(serve, port, concurrency=4, requests=16, max_tokens=64)
            print(f"engine: direct {engine['direct_tok_s']:.1f} tok/s, ingress {engine['ingress_tok_s']:.1f} "
                  f"tok/s, ratio {engine['ratio']:.3f}", flush=True)
    finally:
        mock.terminate()
    return engine


def _report(args, rows: list, engine: dict | None) -> None:
    if not rows:
        print(f"real engine: direct {engine['direct_tok_s']:.1f} tok/s, ingress {engine['ingress_tok_s']:.1f} "
              f"tok/s, ingress/direct = {engine['ratio']:.3f} (target >= 0.95)")
        return
    by = {(r["variant"], r["concurrency"]): r for r in rows}
    mode = "default" if args.default_mode else "fast (THROUGHPUT_OPTIMIZED + HA proxy)"
    print(f"\nGateway overhead — Serve mode: {mode}\n")
    print("| variant | in flight | p50 ms | p99 ms | req/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['concurrency']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['rps']:.0f} |")
    conc = [int(c) for c in args.concurrency.split(",")]
    lo, hi = min(conc), max(conc)
    added = by[("horizon", lo)]["p50_ms"] - by[("bare", lo)]["p50_ms"]
    sat_ratio = max(by[("horizon", c)]["rps"] for c in conc) / max(by[("bare", c)]["rps"] for c in conc)
    print(f"\nhorizon ingress adds {added:+.2f} ms p50 over the bare two-hop baseline at {lo} in flight "
          f"(target <= 1 ms); saturation throughput {sat_ratio:.1%} of the baseline's (target >= 90 %).")
    print(f"bare two-hop adds {by[('bare', lo)]['p50_ms'] - by[('mock', lo)]['p50_ms']:+.2f} ms p50 over the direct mock.")
    if engine:
        print(f"real engine: ingress/direct output tokens/s = {engine['ratio']:.3f} (target >= 0.95)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"mode": mode, "rows": rows, "engine": engine}, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
