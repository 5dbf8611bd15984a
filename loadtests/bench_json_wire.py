"""The ingress's JSON, written and read as it was (the standard library through Starlette's
``JSONResponse``, embedding rows as Python floats) against now (``serve_app.json_wire``: orjson,
embedding rows as the deployment's float32 array), in process.

Each payload is what the ingress handles per request: a short chat answer (the gateway
benchmark's), a long one (about 6 KB of text), one stream chunk, an ``/v1/embeddings`` answer of
16 texts × 384 dimensions (the packaged MiniLM's size; "before" includes the ``tolist()`` the
client made), and reading a 1-KB chat request body. Rounds (>= 3) alternate the two variants,
rotating their order; the table gives microseconds per call, median (min–max) over the rounds,
and the embeddings answer's size in bytes.

  .venv/bin/python loadtests/bench_json_wire.py [--rounds 5] [--out loadtests/results/json_wire.json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from starlette.responses import JSONResponse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import add_rounds_argument, fmt, machine, markdown_table, rotated, stats  # noqa: E402
from serve_app.json_wire import JSONAnswer, loads  # noqa: E402

DEFAULT_OUT = ROOT / "loadtests" / "results" / "json_wire.json"
VARIANTS = ("stdlib", "json_wire")


def payloads() -> dict[str, dict[str, Callable[[], Any]]]:
    """For each payload, the call each variant makes."""
    rng = np.random.default_rng(0)
    short = {"id": "chatcmpl-sim-1", "object": "chat.completion", "created": 1764979200, "model": "qwen-72b",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    words = ["routing", "fleet", "naïve", "résumé", "结果", "token", "replica", "answer"]
    long = json.loads(json.dumps(short))
    long["choices"][0]["message"]["content"] = " ".join(words[i % len(words)] for i in range(700))
    chunk = {"id": "chatcmpl-sim-1", "object": "chat.completion.chunk", "created": 1764979200, "model": "qwen-72b",
             "choices": [{"index": 0, "delta": {"content": " replica"}, "finish_reason": None}]}
    rows = rng.standard_normal((16, 384)).astype(np.float32)

    def embeddings(vectors) -> dict:
        return {"object": "list", "model": "bge-m3",
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 160, "total_tokens": 160}}

    body = json.dumps({"model": "qwen-72b", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "summarise the replica log " * 36}]}).encode()
    return {
        "short answer": {"stdlib": lambda: JSONResponse(short).body, "json_wire": lambda: JSONAnswer(short).body},
        "long answer (6 KB)": {"stdlib": lambda: JSONResponse(long).body, "json_wire": lambda: JSONAnswer(long).body},
        "stream chunk": {"stdlib": lambda: JSONResponse(chunk).body, "json_wire": lambda: JSONAnswer(chunk).body},
        "embeddings 16 x 384": {"stdlib": lambda: JSONResponse(embeddings(rows.tolist())).body,
                                "json_wire": lambda: JSONAnswer(embeddings(rows)).body},
        "read a 1-KB request": {"stdlib": lambda: json.loads(body), "json_wire": lambda: loads(body)},
    }


def per_call_us(call: Callable[[], Any], seconds: float = 0.3) -> float:
    call()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            call()
        n += 10
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_rounds_argument(parser)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    cases = payloads()
    rows = []
    for rnd in range(args.rounds):
        for name, calls in cases.items():
            for variant in rotated(list(VARIANTS), rnd):
                rows.append({"round": rnd + 1, "payload": name, "variant": variant,
                             "us_per_call": per_call_us(calls[variant])})
    summary = {}
    for name in cases:
        summary[name] = {v: stats([r["us_per_call"] for r in rows if r["payload"] == name and r["variant"] == v])
                         for v in VARIANTS}
    sizes = {v: len(cases["embeddings 16 x 384"][v]()) for v in VARIANTS}
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    print(f"machine: {machine()}; command: {command}; {args.rounds} rounds, µs per call, median (min–max)\n")
    print(markdown_table(["payload", "stdlib (before)", "json_wire (now)"],
                         [[name, fmt(s["stdlib"], 1), fmt(s["json_wire"], 1)] for name, s in summary.items()]))
    print(f"\nembeddings answer: {sizes['stdlib']} bytes before, {sizes['json_wire']} now")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "command": command, "rows": rows, "summary": summary,
                                    "embeddings_bytes": sizes}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
