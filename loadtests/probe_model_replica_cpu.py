"""What the simulated model replica costs per request against the bare graph's ``Zero`` (issue 18).

``bench_gateway.py`` compares the gateway, in front of the zero-latency simulated ``qwen-72b``,
with the bare two-hop graph, in front of ``Zero`` (a deployment that returns a fixed dict). Its
``bare-sim`` row puts the bare ingress in front of the simulated deployment instead, and that
row gives fewer req/s than ``bare``: part of the saturation gap is the backend, not the gateway.
This probe measures the model replica's own CPU per request, behind a bare ingress each:
- ``zero``: ``Zero`` of ``bench_gateway.py``'s bare graph;
- ``sim-autoscaled``: the gateway's simulated ``qwen-72b`` as the sim profile deploys it
  (queue-depth autoscaling, ``record_autoscaling_stats``);
- ``sim-fixed``: the same simulated engine and settings in a deployment of one fixed replica
  (no autoscaling), so the difference to ``sim-autoscaled`` is Serve's autoscaling plumbing.

Rounds (>= 3) rotate the order; each row drives ``--concurrency`` closed-loop requests and reads
the replica's CPU time (``psutil``) over ``--seconds`` in the middle of the load. A diagnostic,
not a target; the rows land in ``--out``.

  .venv/bin/python loadtests/probe_model_replica_cpu.py [--rounds 4] [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import BODY, deploy_bare, deploy_bare_stream, load, sim_args, wait_ready  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, markdown_table, rotated, stats  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

DEFAULT_OUT = ROOT / "loadtests" / "results" / "model_replica_cpu.json"
VARIANTS = ("zero", "sim-autoscaled", "sim-fixed")


def replica_process(title: str):
    """The replica's process, by the title Ray gives it."""
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        if title in " ".join(proc.info.get("cmdline") or []):
            return proc
    raise LookupError(f"no process {title}")


def cpu_s(proc) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def deploy_fixed_sim(serve, sim_settings: dict) -> None:
    """The simulated engine in one fixed replica, behind a bare ingress (application ``plain``)."""
    from deployments.simulated import SimulatedLLMDeployment

    app = FastAPI()

    @serve.deployment(name="plain-ingress", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
    @serve.ingress(app)
    class PlainIngress:
        def __init__(self, sim):
            self.sim = sim

        @app.post("/v1/chat/completions")
        async def chat(self, request: Request):
            return JSONResponse(await self.sim.chat.remote(await request.json()))

    sim = SimulatedLLMDeployment.options(name="plainsim", num_replicas=1, max_ongoing_requests=1024,
                                         ray_actor_options={"num_cpus": 0}, user_config=sim_settings)
    serve.run(PlainIngress.bind(sim.bind("qwen-72b", 4096, 0.0)), name="plain", route_prefix="/plain")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_rounds_argument(parser)
    parser.add_argument("--seconds", type=float, default=6, help="CPU time read over this long, per row")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    rows: list[dict] = []
    with serve_cluster() as port:
        from ray import serve

        from serve_app.app import build_app

        app_args = sim_args()
        serve.run(build_app(app_args), name="horizon", route_prefix="/horizon")
        wait_ready(f"http://127.0.0.1:{port}/horizon")
        deploy_bare(serve)
        deploy_bare_stream(serve, "horizon", "model-qwen-72b")
        deploy_fixed_sim(serve, next(m for m in app_args["models"] if m["alias"] == "qwen-72b")["simulated"])
        base = f"http://127.0.0.1:{port}"
        targets = {"zero": (f"{base}/bare/v1/chat/completions", "ServeReplica:bare:zero"),
                   "sim-autoscaled": (f"{base}/bare-stream/v1/chat/completions", "ServeReplica:horizon:model-qwen-72b"),
                   "sim-fixed": (f"{base}/plain/v1/chat/completions", "ServeReplica:plain:plainsim")}
        for url, _ in targets.values():
            load(url, args.concurrency, 2, BODY)  # warm-up
        for rnd in range(args.rounds):
            for name in rotated(list(VARIANTS), rnd):
                url, title = targets[name]
                proc = replica_process(title)
                result: dict = {}
                loader = threading.Thread(target=lambda: result.update(
                    load(url, args.concurrency, args.seconds + 2, BODY)))
                loader.start()
                time.sleep(1)
                c0, t0 = cpu_s(proc), time.monotonic()
                time.sleep(args.seconds)
                c1, t1 = cpu_s(proc), time.monotonic()
                loader.join()
                row = {"round": rnd + 1, "variant": name, "rps": result["rps"],
                       "model_ms_per_request": (c1 - c0) / (result["rps"] * (t1 - t0)) * 1000}
                rows.append(row)
                print(json.dumps(row), flush=True)
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["variant"]] = row["model_ms_per_request"]
    summary = {name: stats([r[name] for r in by_round.values()]) for name in VARIANTS}
    vs_zero = {name: stats([r[name] / r["zero"] for r in by_round.values()]) for name in VARIANTS[1:]}
    print(markdown_table(["model replica", "CPU ms per request", "÷ zero, per round"],
                         [[name, fmt(summary[name], 3), fmt(vs_zero[name], 2) if name in vs_zero else "–"]
                          for name in VARIANTS]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                                    "machine": machine(), "rounds": rows, "summary": summary,
                                    "vs_zero": vs_zero}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
