"""What an idle gap costs a call through Ray Serve on this machine, and where the Fusion looper's
slower sub-calls come from (issue 18's Fusion figure).

The bare hop and the call pattern of ``bench_fusion_ray.py`` run their calls back to back, so
each finds the replicas still awake from the one before. The looper's panel instead follows the
request's time outside the looper (HTTP, routing and its embedding call), during which the
models sit idle. Each row below runs ``--requests`` timed calls after 3 warm-up ones; the rows
are interleaved over ``--rounds`` in an order that rotates from round to round:

- ``hop@G``: one bare hop (a deployment-handle call from this process to the zero-latency
  ``qwen-72b``) after an idle gap of G ms, for each G in ``--gaps``;
- ``pattern@G``: Fusion's call pattern for a panel of 3 (the panel's three calls at once, then
  the judge twice), from this process, after the same gap;
- ``replica-pattern`` and ``replica-pattern-after-embed``: the same pattern made from inside a
  plain Serve replica (none of the gateway's code), back to back, and right after an embedding
  call to the routing embedder, which is what a Fusion request's routing does just before the
  looper starts;
- ``looper``: the gateway's looper total for a panel of 3, Fusion requests over HTTP one at a
  time (``fusion.timings_ms.total``), with the request's time outside the looper beside it.

  .venv/bin/python loadtests/bench_idle_gap.py [--rounds 5] [--requests 40] [--gaps 0,3,10,30,100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_fusion_ray import JUDGE, JUDGE_PROMPT, PANEL_PROMPT, PANELS, bare_pattern, panel_run  # noqa: E402
from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.bench_scale import bare_hops  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, markdown_table, rotated, stats  # noqa: E402
from loadtests.lib.serve_cluster import run_handle_calls, serve_cluster  # noqa: E402

MEMBERS = PANELS[3]
EMBEDDER = "bge-m3"  # the sim profile's routing embedder (the packaged MiniLM)


def gaps_list(text: str) -> list[float]:
    gaps = [float(g) for g in text.split(",") if g.strip()]
    if not gaps or any(g < 0 for g in gaps):
        raise argparse.ArgumentTypeError("--gaps takes a comma-separated list of gaps >= 0 ms")
    return gaps


def prober_deployment():
    """A plain Serve deployment that makes Fusion's call pattern itself: the same calls as the
    looper's, from a replica, with none of the gateway's code on the way."""
    from ray import serve

    from serve_app.fleet.names import deployment_name

    @serve.deployment(name="idle-gap-prober", ray_actor_options={"num_cpus": 0.01})
    class Prober:
        def __init__(self, app: str):
            self._app = app
            self._handles: dict = {}

        def _handle(self, alias: str):
            if alias not in self._handles:
                self._handles[alias] = serve.get_deployment_handle(deployment_name(alias), app_name=self._app)
            return self._handles[alias]

        async def pattern(self, requests: int, embed_first: bool) -> list[float]:
            def body(model: str, prompt: str) -> dict:
                return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 16}

            out = []
            for i in range(requests + 3):
                if embed_first:
                    await self._handle(EMBEDDER).embed.remote([PANEL_PROMPT])
                start = time.perf_counter()
                await asyncio.gather(*(self._handle(m).chat.remote(body(m, PANEL_PROMPT)) for m in MEMBERS))
                for _ in ("analysis", "synthesis"):
                    await self._handle(JUDGE).chat.remote(body(JUDGE, JUDGE_PROMPT))
                if i >= 3:
                    out.append((time.perf_counter() - start) * 1000)
            return out

    return Prober


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--gaps", type=gaps_list, default=[0.0, 3.0, 10.0, 30.0, 100.0],
                        help="idle gaps in ms, comma-separated")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "idle_gap.json"))
    args = parser.parse_args()
    import httpx

    rows = [f"{kind}@{g:g}" for kind in ("hop", "pattern") for g in args.gaps] + \
        ["replica-pattern", "replica-pattern-after-embed", "looper"]
    runs: list[dict] = []
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        prober = serve.run(prober_deployment().bind("horizon"), name="idle-gap-prober", route_prefix=None)
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)

        async def from_replica(embed_first: bool) -> list[float]:
            return await prober.pattern.remote(args.requests, embed_first)

        with httpx.Client(timeout=60) as http:
            for rnd in range(1, args.rounds + 1):
                for row in rotated(rows, rnd - 1):
                    if row == "looper":
                        r = panel_run(http, url, MEMBERS, args.requests)
                        r = {"p50_ms": r["total_p50_ms"], "outside_looper_p50_ms": r["outside_looper_p50_ms"]}
                    elif row.startswith("replica-pattern"):
                        r = {"p50_ms": statistics.median(run_handle_calls(from_replica(row.endswith("embed"))))}
                    else:
                        kind, gap = row.split("@")
                        idle_s = float(gap) / 1000
                        calls = bare_hops("horizon", args.requests, idle_s) if kind == "hop" else \
                            bare_pattern("horizon", MEMBERS, args.requests, idle_s)
                        r = {"p50_ms": statistics.median(calls)}
                    runs.append({"round": rnd, "row": row, **r})
                    print(f"round {rnd} {row:<28} " + " ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
    rounds = range(1, args.rounds + 1)
    by = {(r["round"], r["row"]): r for r in runs}
    table = {row: {k: stats([by[(n, row)][k] for n in rounds]) for k in by[(1, row)] if k.endswith("_ms")}
             for row in rows}
    print(f"\nIdle gaps and Ray Serve calls — {args.rounds} rounds of {args.requests} calls per row; "
          f"machine {machine()}")
    gaps = ",".join(f"{g:g}" for g in args.gaps)
    print(f"command: .venv/bin/python loadtests/bench_idle_gap.py --rounds {args.rounds} "
          f"--requests {args.requests} --gaps {gaps}\n")
    print(markdown_table(
        ["idle gap before each call, ms", "bare hop p50 ms", "Fusion's call pattern (panel of 3) p50 ms"],
        [[f"{g:g}", fmt(table[f"hop@{g:g}"]["p50_ms"]), fmt(table[f"pattern@{g:g}"]["p50_ms"])] for g in args.gaps]))
    print()
    print(markdown_table(["the same call pattern (panel of 3)", "p50 ms"], [
        ["from a plain Serve replica, back to back", fmt(table["replica-pattern"]["p50_ms"])],
        ["from a plain Serve replica, right after an embedding call",
         fmt(table["replica-pattern-after-embed"]["p50_ms"])],
        [f"through the gateway: the looper's total (request's time outside the looper "
         f"{fmt(table['looper']['outside_looper_p50_ms'])} ms)", fmt(table["looper"]["p50_ms"])]]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "rounds": args.rounds, "requests": args.requests,
                                          "gaps_ms": args.gaps, "runs": runs, "table": table}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
