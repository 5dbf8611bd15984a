"""The gateway's own Python per request, in process: its HTTP app against a bare FastAPI route.

The cluster benchmarks (``bench_gateway.py``, ``cpu_per_request.py``) measure the gateway with
everything Ray runs beside it on the same two cores, so a few microseconds of the gateway's own
code drown in the spread. This one takes Ray out: both ASGI apps are called directly in one
process, one request at a time, and each model call is answered at once by the same in-process
handle (what ``bench_gateway.py``'s ``Zero`` deployment answers). The rows:

- ``gateway``: ``create_app()`` over the gateway that ``compose_gateway()`` builds from
  ``bench_gateway.py``'s zero-latency sim profile (the same request body, model by direct alias):
  authentication, validation, the chat pipeline, resilience, the handle client, metrics, headers;
- ``bare``: ``bench_gateway.py``'s bare ingress route (FastAPI, ``await handle.chat.remote(await
  request.json())``).

Outside a Ray worker the metric objects do not export, so what Ray's metrics agent does with the
gateway's observations is not in these figures (``cpu_per_request.py`` has it).

Rounds (>= 3) alternate the two rows, rotating their order; each row is ``--requests`` calls
after a warm-up. The table gives microseconds per request, median (min–max) over the rounds,
and per round the gateway's extra microseconds and its ratio to the bare route. ``--profile N``
then prints the gateway's N most expensive functions by own time (cProfile; cProfile's own
overhead inflates every figure in that list, so it ranks, it does not measure).

  .venv/bin/python loadtests/bench_ingress_inprocess.py [--rounds 5] [--requests 20000]
      [--profile 40] [--out loadtests/results/ingress_inprocess.json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import (add_rounds_argument, fmt, machine, markdown_table,  # noqa: E402
                                  rotated, stats)

DEFAULT_OUT = ROOT / "loadtests" / "results" / "ingress_inprocess.json"
ROWS = ("gateway", "bare")

# What bench_gateway.py's Zero deployment answers.
ANSWER = {"id": "zero", "object": "chat.completion", "created": 0, "model": "qwen-72b",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class InstantHandle:
    """A deployment handle whose every method answers ``ANSWER`` at once."""

    class _Method:
        def remote(self, body: dict) -> Awaitable[dict]:
            async def answer() -> dict:
                return dict(ANSWER)
            return answer()

    def options(self, **_: Any) -> "InstantHandle":
        return self

    def __getattr__(self, method: str) -> "InstantHandle._Method":
        return InstantHandle._Method()


def gateway_app():
    """The gateway's HTTP app as an ingress replica builds it, over instant handles."""
    from loadtests.bench_gateway import sim_args
    from serve_app.api.http import create_app
    from serve_app.app import compose_gateway
    from serve_app.config.loader import parse_config
    from serve_app.fleet.availability import DeploymentBoard
    from serve_app.fleet.handles import HandleFleet
    from serve_app.resilience.breaker import LocalBreakerStore

    cfg = parse_config(sim_args())
    handles = {m.alias: InstantHandle() for m in cfg.models if m.shares_engine_with is None}
    board = DeploymentBoard(dict, retry_after_s=max(1, cfg.global_.server.retry_after_s))
    gateway = compose_gateway(cfg, base_fleet=HandleFleet(cfg, handles, board=board), board=board,
                              breaker_store=LocalBreakerStore(cfg.resilience.breaker))
    return create_app(gateway)


def bare_app():
    """bench_gateway.py's bare ingress route over the same instant handle. (``Request`` is
    imported at module level: with postponed annotations FastAPI resolves the endpoint's
    annotation against module globals.)"""
    app = FastAPI()
    handle = InstantHandle()

    async def chat(request: Request):
        return await handle.chat.remote(await request.json())

    app.post("/v1/chat/completions")(chat)
    return app


def caller(app, body: bytes) -> Callable[[], Awaitable[int]]:
    """One POST /v1/chat/completions through ``app``'s ASGI interface; returns the status."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def call() -> int:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                 "query_string": b"", "root_path": "", "headers": headers,
                 "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000)}
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        status = 0

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # the client never disconnects
            return {}

        async def send(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(scope, receive, send)
        return status

    return call


async def per_request_us(call: Callable[[], Awaitable[int]], requests: int) -> float:
    start = time.perf_counter()
    for _ in range(requests):
        await call()
    return (time.perf_counter() - start) / requests * 1e6


async def run(rounds: int, requests: int, warmup: int = 1000) -> list[dict]:
    """Every round's rows: ``{"round", "variant", "us_per_request"}``."""
    from loadtests.bench_gateway import BODY

    body = json.dumps(BODY).encode()
    calls = {"gateway": caller(gateway_app(), body), "bare": caller(bare_app(), body)}
    for name, call in calls.items():
        status = await call()
        if status != 200:
            raise RuntimeError(f"{name}: HTTP {status} for the benchmark's request")
        for _ in range(warmup):
            await call()
    rows = []
    for rnd in range(rounds):
        for name in rotated(list(ROWS), rnd):
            rows.append({"round": rnd + 1, "variant": name,
                         "us_per_request": await per_request_us(calls[name], requests)})
    return rows


def summarize(rows: list[dict]) -> dict:
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["variant"]] = row["us_per_request"]
    per_row = {name: stats([r[name] for r in by_round.values()]) for name in ROWS}
    added = stats([r["gateway"] - r["bare"] for r in by_round.values()])
    ratio = stats([r["gateway"] / r["bare"] for r in by_round.values()])
    return {"rows": per_row, "gateway_added_us": added, "gateway_ratio": ratio}


async def profile(top: int, requests: int) -> str:
    from loadtests.bench_gateway import BODY

    call = caller(gateway_app(), json.dumps(BODY).encode())
    for _ in range(1000):
        await call()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(requests):
        await call()
    prof.disable()
    import io

    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_rounds_argument(parser)
    parser.add_argument("--requests", type=int, default=20000, help="calls per row and round")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="then print the gateway's N most expensive functions (cProfile)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    rows = asyncio.run(run(args.rounds, args.requests))
    summary = summarize(rows)
    print(markdown_table(["variant", "µs per request"],
                         [[name, fmt(summary["rows"][name], 1)] for name in ROWS]))
    print(f"\nper round: the gateway adds {fmt(summary['gateway_added_us'], 1)} µs, "
          f"{fmt(summary['gateway_ratio'], 2)} × the bare route")
    result = {"command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
              "machine": machine(), "requests": args.requests, "rounds": rows, **summary}
    if args.profile:
        result["profile"] = asyncio.run(profile(args.profile, min(args.requests, 5000)))
        print("\n" + result["profile"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
