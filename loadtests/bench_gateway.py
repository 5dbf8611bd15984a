"""Gateway overhead benchmark (issue: serving foundation), side by side in one run.

Variants, all over HTTP on 127.0.0.1 with the same chat body:
  (a) mock     — a FastAPI/uvicorn OpenAI mock that answers at once, called directly;
  (b) bare     — the bare two-hop Ray Serve baseline: FastAPI ingress → handle → zero-latency
                 deployment, no logic;
  (c) horizon  — this project's ingress (validation, resilience guard, headers) in front of the
                 zero-latency simulated deployment (direct alias, so routing is not measured).
Each at 1, 16 and 64 requests in flight: p50, p99, req/s. Streaming (``--stream``, on by
default): time to first token through the gateway vs a bare streaming ingress that calls the
handle of the very same zero-latency simulated deployment (``bare-stream``), same SSE transport;
and ``bare-sim``, that bare ingress answering whole (non-streamed) requests from the same
simulated deployment: the gateway's saturation against it is its own work alone, since the
backend is the same (a diagnostic beside the target, which is against ``bare``).

Every variant runs once per round, the variants' order rotating from round to round, for
``--rounds`` rounds (>= 3): the table gives each row's median and min-max over the rounds, and the
ratios (gateway / bare) are computed per round, so a machine that slows down for a while touches
every variant alike. A ratio whose range straddles the target is reported as such.

Serve runs in the mode chosen by the environment (``horizon``'s default is the fast mode;
``--default-mode`` measures Serve's defaults).

Real-engine path (``--engine``): output tokens/s of a real vLLM engine (configs/local.yaml)
through the ingress vs calling the vLLM deployment's handle directly, same concurrency, phases
interleaved over the rounds; then, each round, both paths at once with half the requests in
flight each (``paired``, a diagnostic: the machine's slow spells touch both alike, but it is
far less sensitive to what a path adds).

  .venv/bin/python loadtests/bench_gateway.py [--seconds 6] [--rounds 3] [--engine] [--default-mode]

Each ratio is reported with its distribution-free 95 % interval of the median and a verdict
against its target. ``--pool A.json B.json ...`` measures nothing: it pools earlier runs' rounds
(each round paired within its own run) to narrow that interval:

  .venv/bin/python loadtests/bench_gateway.py --pool loadtests/results/gateway-7rounds*.json --out pooled.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi import FastAPI, Request

from loadtests.lib.rounds import (add_rounds_argument, fmt as _fmt, fmt_interval, machine as _machine,
                                  median_interval, rotated as _rotated, stats as _stats, verdict)
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


def deploy_bare_stream(serve, app_name: str, deployment: str, name: str = "bare-stream") -> None:
    """An ingress with no logic in front of ``deployment`` of the gateway's own application: the
    direct-handle baseline for time to first token, over the same HTTP/SSE transport as the
    gateway, and (``stream`` false) for a whole answer from the very deployment the gateway
    calls, so that a difference to the gateway is the gateway's own work, not the backend's.
    ``name``: the application it is deployed as, served at ``/<name>``."""
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()

    @serve.deployment(name="bare-stream-ingress", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
    @serve.ingress(app)
    class BareStreamIngress:
        def __init__(self):
            self.whole = serve.get_deployment_handle(deployment, app_name=app_name)
            self.model = self.whole.options(stream=True)

        @app.post("/v1/chat/completions")
        async def chat(self, request: Request):
            body = await request.json()
            if not body.get("stream"):
                return JSONResponse(await self.whole.chat.remote(body))

            async def sse():
                async for chunk in self.model.chat_stream.remote(body):
                    yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")

    serve.run(BareStreamIngress.bind(), name=name, route_prefix=f"/{name}")


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
    # The benchmark's requests carry no session id, so the session store is never read; the sim
    # profile's Redis (which a fresh machine does not run) would only keep /health "degraded".
    args["sessions"] = {"enabled": False}
    args["auth"] = {**args.get("auth", {}), "rate_limit_store": "inprocess"}
    # Zero latency everywhere: admission must not be the bottleneck being measured.
    res = dict(args.get("resilience", {}))
    res.pop("admission", None)
    args["resilience"] = res
    return args


def wait_ready(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 600
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", timeout=30)
            body = r.json()
            if r.status_code == 200 and body.get("status") == "ready":
                return
            last = f"{r.status_code} {body.get('status')}: {str(body)[:600]}"
        except (httpx.HTTPError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(1)
    raise TimeoutError(f"{url} not ready after 600 s; last /health: {last}")


async def output_tokens(call: Callable[[int], Awaitable[int]], concurrency: int, requests: int) -> int:
    """Requests ``0 .. requests - 1`` through ``call``, ``concurrency`` at a time; their output tokens."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> int:
        async with sem:
            return await call(i)

    return sum(await asyncio.gather(*(one(i) for i in range(requests))))


async def engine_tokens_per_s(handle_call, concurrency: int, requests: int) -> float:
    start = time.perf_counter()
    tokens = await output_tokens(handle_call, concurrency, requests)
    return tokens / (time.perf_counter() - start)


async def paired_tokens_per_s(calls: dict[str, Callable[[int], Awaitable[int]]], concurrency_each: int,
                              requests_each: int) -> dict[str, float]:
    """Every path of ``calls`` at once, ``concurrency_each`` requests in flight each, against the
    same engine: each path's output tokens over the time to its own last answer.

    The engine batches the paths' requests together, so a slow spell of the machine slows them
    alike, where alternating phases (:func:`engine_tokens_per_s`) put a path's phase in whichever
    spell it falls in: phases of one path moved ±15 % from round to round on two cores. A
    diagnostic, not the target's figure: what a path adds between its requests shows only in
    part, since the other path's requests meanwhile decode in a smaller, faster batch and the
    late ones catch up (a known ≈ 6 % handicap moved it by 0.3 %, docs/benchmarks.md).
    """
    start = time.perf_counter()

    async def path(call: Callable[[int], Awaitable[int]]) -> float:
        tokens = await output_tokens(call, concurrency_each, requests_each)
        return tokens / (time.perf_counter() - start)

    rates = await asyncio.gather(*(path(call) for call in calls.values()))
    return dict(zip(calls, rates))


def pooled_client(concurrency: int):
    """One HTTP client for every gateway request of the engine phases, with a pool of
    keep-alive connections, as an OpenAI client is used. A client per request cost the gateway
    phase ≈ 48 ms a request (httpx builds an SSL context and opens a connection each time;
    1-token requests took 168 ms that way against 120 ms direct and 120 ms with one client),
    and since every request of a wave ends on the same step, the engine waited that long for
    the next wave."""
    import httpx

    return httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=concurrency))


def gateway_tokens(client, url: str, body: Callable[[int], dict]) -> Callable[[int], Awaitable[int]]:
    """Request ``i`` through the gateway at ``url`` over ``client``; returns its output tokens."""
    async def call(i: int) -> int:
        r = await client.post(url, json=body(i))
        return r.json()["usage"]["completion_tokens"]
    return call


def run_engine(serve, port: int, concurrency: int, requests: int, max_tokens: int, rounds: int,
               client_per_request: bool = False) -> dict:
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

    handle = serve.get_deployment_handle("model-k2", app_name="local")

    async def direct(i: int) -> int:
        req = ChatCompletionRequest(**{**body(i), "stream": False})
        async for item in handle.options(stream=True).chat.remote(req):
            return item.usage.completion_tokens
        return 0

    async def all_phases() -> tuple[dict[str, float], list[dict[str, float]]]:
        # One event loop for every phase: the driver's handle is bound to the loop it first ran on.
        # Warm both paths first (the first requests through a path pay one-off set-up costs).
        chat_url = f"{url}/v1/chat/completions"

        async def via_own_client(i: int) -> int:  # the gateway side before stop 30 (a diagnostic)
            async with pooled_client(1) as own:
                return await gateway_tokens(own, chat_url, body)(i)

        async with pooled_client(concurrency) as client:
            via_ingress = via_own_client if client_per_request else gateway_tokens(client, chat_url, body)
            await engine_tokens_per_s(direct, concurrency, concurrency)
            await engine_tokens_per_s(via_ingress, concurrency, concurrency)
            out, paired = {}, []
            for r in range(rounds):
                phases = [("direct", direct), ("ingress", via_ingress)]
                for name, call in (phases if r % 2 == 0 else phases[::-1]):
                    out[f"{name}#{r}"] = await engine_tokens_per_s(call, concurrency, requests)
                    print(f"  round {r + 1} engine {name}: {out[f'{name}#{r}']:.1f} output tok/s", flush=True)
                # Then both paths at once, half the requests in flight each (the same engine load).
                both = await paired_tokens_per_s({"direct": direct, "ingress": via_ingress},
                                                 concurrency // 2, requests // 2)
                paired.append(both)
                print(f"  round {r + 1} engine paired: direct {both['direct']:.1f}, "
                      f"ingress {both['ingress']:.1f} output tok/s", flush=True)
        return out, paired

    results, paired = asyncio.run(all_phases())
    ratios = [results[f"ingress#{r}"] / results[f"direct#{r}"] for r in range(rounds)]
    paired_ratios = [p["ingress"] / p["direct"] for p in paired]
    return {"rounds": rounds, "concurrency": concurrency, "requests_per_phase": requests,
            "max_tokens": max_tokens, "runs": results, "ratio_per_round": ratios, "ratio": _stats(ratios),
            "paired_runs": paired, "paired_ratio_per_round": paired_ratios, "paired_ratio": _stats(paired_ratios)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    add_rounds_argument(parser)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming TTFT variants")
    parser.add_argument("--engine", action="store_true", help="also measure the real vLLM path")
    parser.add_argument("--engine-only", action="store_true", help="only the real vLLM path")
    parser.add_argument("--default-mode", action="store_true", help="Ray Serve defaults, not fast mode")
    # A phase of 8 requests x 48 tokens lasts ~5 s on two cores: round-to-round spread of
    # 0.83-0.96 in the ratio. Longer phases and more rounds narrow it.
    parser.add_argument("--engine-requests", type=int, default=16, help="requests per engine phase")
    parser.add_argument("--engine-tokens", type=int, default=64, help="output tokens per engine request")
    parser.add_argument("--engine-rounds", type=int, default=0, help="engine rounds (default: --rounds)")
    parser.add_argument("--engine-client-per-request", action="store_true",
                        help="diagnostic: a new HTTP client for every gateway request (as before stop 30)")
    parser.add_argument("--out", help="results JSON (default loadtests/results/gateway.json, "
                                         "gateway-pooled.json with --pool)")
    parser.add_argument("--pool", nargs="+", metavar="RESULTS_JSON",
                        help="measure nothing: pool the rounds of these runs' JSON files and report "
                             "every ratio's median, 95 %% interval of the median and verdict (to --out)")
    args = parser.parse_args()
    results = ROOT / "loadtests" / "results"
    if args.pool:
        pool(args.pool, args.out or str(results / "gateway-pooled.json"))
        return 0
    args.out = args.out or str(results / "gateway.json")
    rows: list[dict] = []
    with serve_cluster(fast=not args.default_mode) as port:
        engine = _run_variants(args, port, rows)
    _report(args, rows, engine)
    return 0


def _run_variants(args, port: int, rows: list) -> dict | None:
    from ray import serve

    from serve_app.app import build_app

    mock_port = free_port()
    mock = subprocess.Popen([sys.executable, "-c", MOCK_SERVER, str(mock_port)])
    engine_args = dict(concurrency=4, requests=args.engine_requests, max_tokens=args.engine_tokens,
                       client_per_request=args.engine_client_per_request,
                       rounds=args.engine_rounds or args.rounds)
    try:
        if args.engine_only:
            return run_engine(serve, port, **engine_args)
        deploy_bare(serve)
        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        wait_ready(f"http://127.0.0.1:{port}/horizon")
        targets = {"mock": (f"http://127.0.0.1:{mock_port}/v1/chat/completions", BODY),
                   "bare": (f"http://127.0.0.1:{port}/bare/v1/chat/completions", BODY),
                   "horizon": (f"http://127.0.0.1:{port}/horizon/v1/chat/completions", BODY)}
        if not args.no_stream:
            deploy_bare_stream(serve, "horizon", "model-qwen-72b")
            stream_body = {**BODY, "stream": True, "max_tokens": 16}
            targets["bare-stream"] = (f"http://127.0.0.1:{port}/bare-stream/v1/chat/completions", stream_body)
            # The bare ingress in front of the gateway's own simulated deployment, not Zero.
            targets["bare-sim"] = (f"http://127.0.0.1:{port}/bare-stream/v1/chat/completions", BODY)
            targets["horizon-stream"] = (f"http://127.0.0.1:{port}/horizon/v1/chat/completions", stream_body)
        time.sleep(2)
        names = list(targets)
        for rnd in range(args.rounds):
            order = _rotated(names, rnd)
            for conc in [int(c) for c in args.concurrency.split(",")]:
                for name in order:
                    url, body = targets[name]
                    r = load(url, conc, args.seconds, body)
                    rows.append({"round": rnd + 1, "variant": name, "concurrency": conc, **r})
                    extra = (f" ttft_p50={r['ttft_p50_ms']:.2f}ms" if "ttft_p50_ms" in r else "")
                    print(f"round {rnd + 1} {name:14s} c={conc:<3d} p50={r['p50_ms']:.2f}ms "
                          f"p99={r['p99_ms']:.2f}ms rps={r['rps']:.0f}{extra} errors={r['errors']}", flush=True)
        engine = None
        if args.engine:
            for app in ("bare-stream", "horizon", "bare"):
                if app != "bare-stream" or not args.no_stream:
                    serve.delete(app)
            engine = run_engine(serve, port, **engine_args)
    finally:
        mock.terminate()
    return engine


def _report(args, rows: list, engine: dict | None) -> None:
    machine = _machine()
    command = "python loadtests/bench_gateway.py " + " ".join(sys.argv[1:])
    print(f"\nmachine: {machine['cpus']} CPUs, {machine['cpu']}; command: {command}")
    if rows:
        mode = "default" if args.default_mode else "fast (THROUGHPUT_OPTIMIZED + HA proxy)"
        print(f"Gateway overhead — Serve mode: {mode}; {args.rounds} rounds of {args.seconds:g} s per row, "
              f"median (min–max)\n")
        print("| variant | in flight | p50 ms | p99 ms | req/s | TTFT p50 ms |")
        print("|---|---|---|---|---|---|")
        conc = [int(c) for c in args.concurrency.split(",")]
        variants = list(dict.fromkeys(r["variant"] for r in rows))
        for c in conc:
            for v in variants:
                rs = [r for r in rows if r["variant"] == v and r["concurrency"] == c]
                ttft = _fmt(_stats([r["ttft_p50_ms"] for r in rs])) if "ttft_p50_ms" in rs[0] else "–"
                print(f"| {v} | {c} | {_fmt(_stats([r['p50_ms'] for r in rs]))} | "
                      f"{_fmt(_stats([r['p99_ms'] for r in rs]))} | {_fmt(_stats([r['rps'] for r in rs]), 0)} | {ttft} |")
        per_round = per_round_ratios(rows, conc)
        targets = ratio_targets(conc)
        summary = print_ratio_table(per_round, targets)
    else:
        summary, mode = {}, None
    if engine:
        print(f"\nreal engine: ingress/direct output tokens/s per round {[round(x, 3) for x in engine['ratio_per_round']]}, "
              f"median {engine['ratio']['median']:.3f} (target >= 0.97)")
        print(f"real engine, both paths at once: ingress/direct per round "
              f"{[round(x, 3) for x in engine['paired_ratio_per_round']]}, median (min–max) "
              f"{_fmt(engine['paired_ratio'], 3)} (a diagnostic, not the target's figure)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine, "command": command, "mode": mode,
                                          "rounds": args.rounds, "seconds": args.seconds, "rows": rows,
                                          "ratios": summary, "engine": engine}, indent=2))


def per_round_ratios(rows: list[dict], conc: list[int]) -> dict[str, list[float]]:
    """Every gateway-vs-baseline ratio, one value per round (rows keyed by ``round``, which may
    be any hashable: a pooled run uses (file, round)). Ratios are per round so that a slow
    spell of the machine touches both sides of a ratio alike."""
    per_round: dict[str, list[float]] = {}
    lo = min(conc)
    for rnd in dict.fromkeys(r["round"] for r in rows):
        by = {(r["variant"], r["concurrency"]): r for r in rows if r["round"] == rnd}
        per_round.setdefault(f"p50_added_ms_at_{lo}", []).append(by[("horizon", lo)]["p50_ms"] - by[("bare", lo)]["p50_ms"])
        per_round.setdefault("saturation_ratio", []).append(
            max(by[("horizon", c)]["rps"] for c in conc) / max(by[("bare", c)]["rps"] for c in conc))
        for c in conc:
            if c > 1:
                per_round.setdefault(f"p99_ratio_at_{c}", []).append(by[("horizon", c)]["p99_ms"] / by[("bare", c)]["p99_ms"])
        if ("bare-sim", lo) in by:
            per_round.setdefault("saturation_ratio_same_backend", []).append(
                max(by[("horizon", c)]["rps"] for c in conc) / max(by[("bare-sim", c)]["rps"] for c in conc))
            per_round.setdefault("stream_saturation_ratio_same_backend", []).append(
                max(by[("horizon-stream", c)]["rps"] for c in conc) / max(by[("bare-stream", c)]["rps"] for c in conc))
        if ("horizon-stream", lo) in by:
            per_round.setdefault(f"ttft_added_ms_at_{lo}", []).append(
                by[("horizon-stream", lo)]["ttft_p50_ms"] - by[("bare-stream", lo)]["ttft_p50_ms"])
    return per_round


def ratio_targets(conc: list[int]) -> dict[str, str]:
    """Issue 18's target for each ratio; "(diagnostic)" for those that have none."""
    targets = {"saturation_ratio": ">= 0.95", "saturation_ratio_same_backend": "(diagnostic)",
               "stream_saturation_ratio_same_backend": "(diagnostic)",
               f"p50_added_ms_at_{min(conc)}": "<= 0.5", f"ttft_added_ms_at_{min(conc)}": "<= 1.0"}
    for c in conc:
        if c > 1:
            targets[f"p99_ratio_at_{c}"] = "<= 1.2"
    return targets


def ratio_verdicts(per_round: dict[str, list[float]], targets: dict[str, str]) -> dict[str, dict]:
    """Per ratio: median, min-max, rounds, the 95 % interval of the median and the verdict."""
    out = {}
    for name, values in per_round.items():
        interval = median_interval(values)
        target = targets.get(name, "(diagnostic)")
        out[name] = {**_stats(values), "rounds": len(values), "interval_95": interval, "target": target,
                     "verdict": verdict(interval, target) if target.startswith(("<=", ">=")) else "–"}
    return out


def print_ratio_table(per_round: dict[str, list[float]], targets: dict[str, str]) -> dict[str, dict]:
    verdicts = ratio_verdicts(per_round, targets)
    print("\n| ratio (per round) | rounds | median (min–max) | 95 % interval of the median | target | verdict |")
    print("|---|---|---|---|---|---|")
    for name, v in verdicts.items():
        print(f"| {name} | {v['rounds']} | {_fmt(v, 3)} | {fmt_interval(v['interval_95'])} | {v['target']} | "
              f"{v['verdict']} |")
    return verdicts


ENGINE_RATIO = "engine_output_tokens_per_s_ratio"
ENGINE_PAIRED_RATIO = "engine_paired_ratio"


def pool(paths: list[str], out: str) -> dict:
    """Pool the rounds of several runs' JSON files into one set of per-round ratios: seven
    rounds cannot tell a median a few points from its target apart from the round-to-round
    spread; more rounds narrow the interval of the median (saturation's needed 28 in stop 32).
    The simulated rows' ratios pool over the runs that have rows (their in-flight levels must
    match); the real engine's tokens/s ratios over the runs that measured it. Runs are only
    poolable when no code on the measured path changed between them; the caller says so."""
    rows: list[dict] = []
    runs = []
    conc: list[int] | None = None
    engine: dict[str, list[float]] = {}
    for i, path in enumerate(paths):
        data = json.loads(Path(path).read_text())
        if data.get("rows"):
            levels = sorted({r["concurrency"] for r in data["rows"]})
            if conc is not None and levels != conc:
                raise SystemExit(f"{path}: in-flight levels {levels} differ from {conc}; runs must match to pool")
            conc = levels
            rows += [{**r, "round": (i, r["round"])} for r in data["rows"]]
        measured = data.get("engine") or {}
        engine.setdefault(ENGINE_RATIO, []).extend(measured.get("ratio_per_round") or [])
        engine.setdefault(ENGINE_PAIRED_RATIO, []).extend(measured.get("paired_ratio_per_round") or [])
        runs.append({"file": path, "command": data.get("command"), "rounds": data.get("rounds"),
                     "engine_rounds": len(measured.get("ratio_per_round") or []), "machine": data.get("machine")})
    if not runs:
        raise SystemExit("--pool needs at least one results file")
    per_round = per_round_ratios(rows, conc) if conc is not None else {}
    per_round.update({k: v for k, v in engine.items() if v})
    targets = {**(ratio_targets(conc) if conc is not None else {}),
               ENGINE_RATIO: ">= 0.97", ENGINE_PAIRED_RATIO: "(diagnostic)"}
    print(f"pooled {len(paths)} run(s): " + ", ".join(Path(p).name for p in paths))
    verdicts = print_ratio_table(per_round, targets)
    result = {"command": "python loadtests/bench_gateway.py " + " ".join(sys.argv[1:]), "runs": runs,
              "per_round": per_round, "ratios": verdicts}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2))
    return result

if __name__ == "__main__":
    raise SystemExit(main())
