"""Where a request's CPU goes, process by process: the bare two-hop graph against the gateway.

The gateway's saturation is bounded by the CPU every process spends per request on a machine
whose cores they all share (issue 18). This benchmark deploys the same applications as
``bench_gateway.py``: the bare graph (``bare``: a FastAPI ingress in front of Serve's trivial
``Zero``), the same kind of bare ingress in front of the gateway's own simulated ``qwen-72b``
(``bare-sim``: so that a difference to the gateway is the gateway's own work, not the
backend's), the same bare ingress in front of the same simulated engine and settings deployed as
one fixed replica, with no autoscaling (``bare-sim-fixed``: against ``bare-sim``, a difference in
the model replica is Serve's autoscaling plumbing), and the gateway over the zero-latency
simulated fleet (``horizon``). It drives each
at ``--concurrency`` requests in flight for ``--seconds``, and reads every process's
CPU time (user + system, ``psutil``) before and after. A process's CPU during the row divided by
the requests served is its CPU milliseconds per request; processes are grouped by role (the
ingress replica, the model replica, HAProxy, the Serve controller, Ray's metrics agent...).
Background work (the other models' replicas, the controller's loop) is per second, not per
request: it shows up in every row, the bare graph's included. The load generator is not counted
(it is the same for both).

Rows are interleaved over ``--rounds`` (>= 3) rounds in a rotating order; the table gives each
group's median (min-max) and the JSON under ``loadtests/results/`` keeps every round.

  .venv/bin/python loadtests/cpu_per_request.py [--concurrency 64] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import BODY, deploy_bare, deploy_bare_stream, load, sim_args, wait_ready  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt, machine, markdown_table, rotated, stats  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

# (group, substring of the process's command line), first match wins.
GROUPS = (
    ("bare: ingress", "ServeReplica:bare:bare-ingress"),
    ("bare: model (Zero)", "ServeReplica:bare:zero"),
    ("bare-sim: ingress", "ServeReplica:bare-stream:bare-stream-ingress"),
    ("bare-sim-fixed: ingress", "ServeReplica:bare-sim-fixed:bare-stream-ingress"),
    ("bare-sim-fixed: model (simulated, one fixed replica)", "ServeReplica:sim-fixed:"),
    ("horizon: ingress", "ServeReplica:horizon:ingress"),
    ("horizon: model (qwen-72b, simulated)", "ServeReplica:horizon:model-qwen-72b"),
    ("horizon: other models' replicas", "ServeReplica:horizon:"),
    ("HAProxy", "haproxy"),
    ("HAProxy manager", "HAProxyManager"),
    ("Serve controller", "ServeController"),
    ("Serve proxy actor", "ProxyActor"),
    # The breaker registry and the demand board: one actor since stop 55, two before.
    ("horizon: application state actor", "ApplicationState"),
    ("horizon: breaker registry", "BreakerRegistry"),
    ("horizon: demand board", "GatewayDemandBoard"),
    ("Ray metrics agent", "DashboardAgent"),
    ("Ray GCS", "gcs_server"),
    ("raylet", "raylet"),
)
OTHER_RAY = "other Ray processes"


def group_of(cmdline: str) -> str | None:
    for name, key in GROUPS:
        if key in cmdline:
            return name
    return OTHER_RAY if "ray" in cmdline else None


def cpu_by_group() -> collections.Counter:
    import psutil

    out: collections.Counter = collections.Counter()
    for proc in psutil.process_iter(["cmdline"]):
        try:
            group = group_of(" ".join(proc.info.get("cmdline") or []))
            if group is not None and "loadtests.lib.httpload" not in " ".join(proc.info["cmdline"]):
                t = proc.cpu_times()
                out[group] += t.user + t.system
        except Exception:  # noqa: BLE001 - a process that ended meanwhile
            continue
    return out


VARIANTS = ("bare", "bare-sim", "bare-sim-fixed", "horizon")


# The model replica of each bare row, for its ratio to Zero's.
MODEL_GROUP = {"bare": "bare: model (Zero)", "bare-sim": "horizon: model (qwen-72b, simulated)",
               "bare-sim-fixed": "bare-sim-fixed: model (simulated, one fixed replica)"}


def deploy_fixed_sim(serve, app_args: dict, alias: str = "qwen-72b") -> None:
    """The gateway's simulated ``alias``, its engine settings as the profile gives them, as one
    fixed replica (application ``sim-fixed``, no route), behind a bare ingress (application
    ``bare-sim-fixed``)."""
    from deployments.simulated import SimulatedLLMDeployment
    from serve_app.config.loader import parse_config

    cfg = parse_config(app_args)
    model = cfg.model(alias)
    sim = SimulatedLLMDeployment.options(name="sim", num_replicas=1, max_ongoing_requests=1024,
                                         ray_actor_options={"num_cpus": 0},
                                         user_config=model.simulated.model_dump(mode="json"))
    serve.run(sim.bind(alias, model.engine.max_model_len, cfg.simulation.latency_scale),
              name="sim-fixed", route_prefix=None)
    deploy_bare_stream(serve, "sim-fixed", "sim", name="bare-sim-fixed")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    add_rounds_argument(parser)
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "cpu_per_request.json"))
    args = parser.parse_args()
    runs: list[dict] = []
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        deploy_bare(serve)
        app_args = sim_args()
        serve.run(build_app(app_args), name="horizon", route_prefix="/horizon")
        wait_ready(f"http://127.0.0.1:{port}/horizon")
        deploy_bare_stream(serve, "horizon", "model-qwen-72b")
        deploy_fixed_sim(serve, app_args)
        targets = {v: f"http://127.0.0.1:{port}/{prefix}/v1/chat/completions"
                   for v, prefix in zip(VARIANTS, ("bare", "bare-stream", "bare-sim-fixed", "horizon"))}
        for url in targets.values():
            load(url, args.concurrency, 2, BODY)  # warm-up
        for rnd in range(1, args.rounds + 1):
            for variant in rotated(list(targets), rnd - 1):
                before = cpu_by_group()
                r = load(targets[variant], args.concurrency, args.seconds, BODY)
                after = cpu_by_group()
                served = r["rps"] * args.seconds
                per = {g: (after[g] - before[g]) / served * 1000 for g in after if after[g] > before[g]}
                runs.append({"round": rnd, "variant": variant, "rps": r["rps"], "errors": r["errors"],
                             "cpu_ms_per_request": per, "total_ms": sum(per.values())})
                print(f"round {rnd} {variant:8s} {r['rps']:.0f} req/s, {sum(per.values()):.2f} ms CPU per "
                      f"request", flush=True)
    report(args, runs)
    return 0


def report(args, runs: list[dict]) -> None:
    print(f"\nCPU per request, {args.concurrency} in flight, {args.rounds} rounds of {args.seconds:g} s; "
          f"machine {machine()}")
    print(f"command: .venv/bin/python loadtests/cpu_per_request.py --concurrency {args.concurrency} "
          f"--seconds {args.seconds:g} --rounds {args.rounds}\n")
    table: dict = {}
    for variant in VARIANTS:
        rows = [r for r in runs if r["variant"] == variant]
        groups = sorted({g for r in rows for g in r["cpu_ms_per_request"]})
        table[variant] = {"rps": stats([r["rps"] for r in rows]), "total_ms": stats([r["total_ms"] for r in rows]),
                          "groups": {g: stats([r["cpu_ms_per_request"].get(g, 0.0) for r in rows]) for g in groups}}
    groups = sorted(set().union(*(table[v]["groups"] for v in VARIANTS)),
                    key=lambda g: -table["horizon"]["groups"].get(g, {"median": 0})["median"])
    nothing = {"median": 0.0, "min": 0.0, "max": 0.0}
    print(markdown_table(
        ["process group", *(f"{v} ms/request" for v in VARIANTS)],
        [[g, *(fmt(table[v]["groups"].get(g, nothing), 3) for v in VARIANTS)] for g in groups]
        + [["**all counted**", *(fmt(table[v]["total_ms"], 3) for v in VARIANTS)],
           ["req/s", *(fmt(table[v]["rps"], 0) for v in VARIANTS)]]))
    # Per-round ratios of the gateway to each baseline (each round's rows paired).
    by = {(r["round"], r["variant"]): r for r in runs}
    ratios = {}
    for base in ("bare", "bare-sim"):
        ratios[base] = {
            "rps": stats([by[(n, "horizon")]["rps"] / by[(n, base)]["rps"] for n in range(1, args.rounds + 1)]),
            "total_ms": stats([by[(n, "horizon")]["total_ms"] / by[(n, base)]["total_ms"]
                               for n in range(1, args.rounds + 1)])}
        print(f"\nhorizon ÷ {base}, per round: req/s {fmt(ratios[base]['rps'], 3)}, "
              f"CPU per request (all counted) {fmt(ratios[base]['total_ms'], 3)}", end="")
    # The model replicas alone: the simulated engine (autoscaled, and one fixed replica) ÷ Zero.
    for variant in ("bare-sim", "bare-sim-fixed"):
        ratios[f"model {variant} ÷ Zero"] = stats([
            by[(n, variant)]["cpu_ms_per_request"].get(MODEL_GROUP[variant], float("nan"))
            / by[(n, "bare")]["cpu_ms_per_request"].get(MODEL_GROUP["bare"], float("nan"))
            for n in range(1, args.rounds + 1)])
        print(f"\nmodel replica, {variant} ÷ bare (Zero), CPU per request, per round: "
              f"{fmt(ratios[f'model {variant} ÷ Zero'], 3)}", end="")
    print()
    table["ratios"] = ratios
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "concurrency": args.concurrency,
                                          "seconds": args.seconds, "rounds": args.rounds, "runs": runs,
                                          "table": table}, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
