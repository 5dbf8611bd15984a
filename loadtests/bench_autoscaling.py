"""Autoscaling through Ray Serve, per priority class: the queue-depth policy vs Ray Serve's
ongoing-requests policy.

Each run deploys one small application on a local Ray cluster: the ingress and two identical
copies of the simulated ``qwen-72b``, one scaled by each policy. Each copy's engine is reached
under three aliases that share it (``shares_engine_with``), one per task type, so its one
admission line holds three priority classes: ``chat`` (priority 0, the high class), ``code``
(2) and ``reasoning`` (3). Both copies get the SAME open-loop Poisson arrivals: a light phase,
then a step to ``--load`` x a copy's capacity at ``max_replicas``. ``/health`` is polled every
second (replicas over time); the requests arriving during the step are measured per class.

Three variants, all in every round (rotated, so no variant always runs first or last):

* ``same/priority`` — both policies with the SAME delays, look-back and metrics interval; only
  the decision rule differs. **The headline comparison.**
* ``same/fifo`` — the same, with every task type in one priority class: the FIFO baseline of
  the priority check (high-class p95 with priority ≤ 0.7 x FIFO at load ≥ 0.9, while scaling).
* ``shipped/priority`` — each policy as it ships: the queue-depth policy with this project's
  scaling defaults (``ScalingSettings``), Ray's with Ray Serve's ``AutoscalingConfig`` defaults.

What each copy's admission line sends to the model (the profile sets no capacity, so the
defaults apply, serve_app.resilience.admission.default_capacity): the queue-depth copy its
engine slots (the backlog waits in the priority line, and reaches its policy through the
gateway demand board), the ongoing-requests copy ``max_ongoing_requests`` per replica (Ray's
policy only sees what reaches the replicas; what waits there is FIFO). Serve's own
``max_ongoing_requests`` per replica is the profile's (4 x slots here) capped at that figure, as
the gateway deploys every model (``serve_app.autoscaling.options.scaling_options``).

Run (starts and stops its own local Ray; ≈ 5 minutes a round on 2 cores)::

    python loadtests/bench_autoscaling.py --rounds 1 --results loadtests/results/bench_autoscaling.json

``--append`` adds the rounds to an existing results file (run it again to interleave more
rounds without one long run); ``--report`` only prints the tables of a results file. The
results JSON holds every run's rows and replica timeline, the machine and the command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import rotated  # noqa: E402
from serve_app.tools.local_cluster import apply_serve_env, free_port  # noqa: E402
from loadtests.lib.summary import percentile  # noqa: E402

QUEUE_ALIAS = "qwen-72b"
DEFAULT_ALIAS = "qwen-72b-ongoing"
POLICIES = {QUEUE_ALIAS: "queue_depth", DEFAULT_ALIAS: "ongoing_requests"}
POLICY_LABEL = {"queue_depth": "queue-depth", "ongoing_requests": "ongoing-requests (Ray default)"}
# Task type of each alias suffix and its priority class in the shipped profile (sim.yaml).
CLASSES = {"chat": ("", 0), "code": ("-code", 2), "reasoning": ("-reasoning", 3)}
ROLE_OF = {"chat": "chat", "code": "code", "reasoning": "reasoning"}
HIGH = "chat"
VARIANTS = (("same", "priority"), ("same", "fifo"), ("shipped", "priority"))


@dataclass(frozen=True)
class BenchSettings:
    slots: int = 2                  # decoding slots per replica (simulated max_num_seqs)
    latency_scale: float = 0.25     # qwen-72b's SPEC figures x this: ≈ 0.8 s a request
    max_replicas: int = 3
    target_queue_per_replica: float = 2.0
    # "same" timing, for both policies.
    upscale_delay_s: float = 3.0
    downscale_delay_s: float = 30.0
    look_back_period_s: float = 10.0
    metrics_interval_s: float = 1.0
    base_load: float = 0.3          # x ONE replica's capacity, before the step
    load: float = 0.9               # x the capacity at max_replicas, during the step
    warmup_s: float = 10.0
    step_s: float = 75.0
    mix_chat: float = 0.4           # the rest is split evenly between code and reasoning
    seed: int = 7

    @property
    def service_s(self) -> float:
        """Mean time a request holds a slot: TTFT + 99 x TPOT of the simulated qwen-72b."""
        return (800 + 99 * 24) / 1000 * self.latency_scale

    def rate(self, load: float, replicas: int) -> float:
        return load * replicas * self.slots / self.service_s


def ray_default_timing() -> dict[str, float]:
    from ray.serve.config import AutoscalingConfig

    d = AutoscalingConfig()
    return {"upscale_delay_s": d.upscale_delay_s, "downscale_delay_s": d.downscale_delay_s,
            "look_back_period_s": d.look_back_period_s, "metrics_interval_s": d.metrics_interval_s}


def horizon_default_timing() -> dict[str, float]:
    from serve_app.config.models import ScalingSettings

    d = ScalingSettings()
    return {"upscale_delay_s": d.upscale_delay_s, "downscale_delay_s": d.downscale_delay_s,
            "look_back_period_s": d.look_back_period_s, "metrics_interval_s": d.metrics_interval_s}


def timing_of(b: BenchSettings, timing: str, policy: str) -> dict[str, float]:
    if timing == "same":
        return {"upscale_delay_s": b.upscale_delay_s, "downscale_delay_s": b.downscale_delay_s,
                "look_back_period_s": b.look_back_period_s, "metrics_interval_s": b.metrics_interval_s}
    if timing == "shipped":
        return horizon_default_timing() if policy == "queue_depth" else ray_default_timing()
    raise ValueError(f"timing must be 'same' or 'shipped', not {timing!r}")


def bench_args(b: BenchSettings, timing: str, discipline: str) -> dict[str, Any]:
    """The Horizon args of one run: ingress + the two copies, each under three aliases."""
    models: list[dict[str, Any]] = []
    for owner, policy in POLICIES.items():
        scaling = {"policy": policy, "min_replicas": 1, "max_replicas": b.max_replicas,
                   "max_ongoing_requests": 4 * b.slots, "max_queued_requests": -1,
                   "target_queue_per_replica": b.target_queue_per_replica,
                   "target_ongoing_requests": float(b.slots), **timing_of(b, timing, policy)}
        for task, (suffix, _) in CLASSES.items():
            entry: dict[str, Any] = {
                "alias": owner + suffix, "role": ROLE_OF[task], "backend": "simulated",
                "engine": {"model": "Qwen/Qwen2.5-72B-Instruct", "max_model_len": 32768},
                "timeouts": {"first_token_s": 600, "total_s": 600}}
            if suffix:
                entry["shares_engine_with"] = owner
            else:
                entry.update(placement={"num_cpus": 0.1}, scaling=scaling,
                             simulated={"ttft_ms": 800, "tpot_ms": 24, "output_tokens": 100,
                                        "max_num_seqs": b.slots})
            models.append(entry)
    priorities = {task: (prio if discipline == "priority" else 0) for task, (_, prio) in CLASSES.items()}
    return {
        "profile": "bench-autoscaling",
        "description": f"autoscaling benchmark: {timing} timing, {discipline}",
        "simulation": {"latency_scale": b.latency_scale},
        "global": {"server": {"min_replicas": 1, "max_replicas": 1, "max_ongoing_requests": 4096}},
        "sessions": {"enabled": False},
        "models": models,
        # Direct aliases only: a one-decision router without an embedding model or classifier.
        "routing": {"default_decision": "all", "decisions": [{"name": "all", "modelRefs": [{"model": QUEUE_ALIAS}]}],
                    "signals": {"intent": {"classifier": {"enabled": False}}}},
        "resilience": {"priorities": priorities, "default_priority": 0 if discipline == "fifo" else 2,
                       "admission_default": {"max_queue_size": 100000, "max_wait_s": 3600,
                                             "service_time_hint_s": b.service_s}},
    }


# --------------------------------------------------------------------------- statistics


@dataclass
class Sent:
    alias: str
    task: str
    at: float          # seconds since the run's t0 (the scheduled arrival)
    done: float = math.nan
    status: int = 0


@dataclass
class RunResult:
    round: int
    timing: str
    discipline: str
    policy: str
    alias: str
    reaction_s: Optional[float]          # step → first poll with > 1 replica
    reaction_max_s: Optional[float]      # step → first poll at max_replicas
    max_replicas: int
    classes: dict[str, dict[str, float]]  # task → n, failed, p50_ms, p95_ms
    timeline: list[tuple[float, int]]     # (seconds since the step, running replicas)


def arrivals(b: BenchSettings) -> list[tuple[float, str]]:
    """The same Poisson arrival times and classes for every run (seeded)."""
    rng = random.Random(b.seed)
    out: list[tuple[float, str]] = []
    t = 0.0
    for until, rate in ((b.warmup_s, b.rate(b.base_load, 1)),
                        (b.warmup_s + b.step_s, b.rate(b.load, b.max_replicas))):
        while True:
            t += rng.expovariate(rate)
            if t >= until:
                t = until
                break
            roll = rng.random()
            task = HIGH if roll < b.mix_chat else ("code" if roll < b.mix_chat + (1 - b.mix_chat) / 2 else "reasoning")
            out.append((t, task))
    return out


def reaction(timeline: Sequence[tuple[float, int]], at_least: int) -> Optional[float]:
    return next((t for t, n in timeline if t >= 0 and n >= at_least), None)


def class_stats(sent: Sequence[Sent], step_at: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    groups = {task: [s for s in sent if s.task == task] for task in CLASSES}
    groups["low (code+reasoning)"] = [s for s in sent if s.task != HIGH]
    for name, group in groups.items():
        during = [s for s in group if s.at >= step_at]
        ok = [(s.done - s.at) * 1000 for s in during if s.status == 200]
        out[name] = {"n": len(during), "failed": sum(1 for s in during if s.status != 200),
                     "p50_ms": round(percentile(ok, 50), 1), "p95_ms": round(percentile(ok, 95), 1)}
    return out


# --------------------------------------------------------------------------- one run


async def _drive(url: str, b: BenchSettings, plan: list[tuple[float, str]]) -> tuple[list[Sent], list, float]:
    import httpx

    sent: list[Sent] = []
    samples: list[tuple[float, str, int]] = []
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:
        t0 = time.monotonic()
        end = b.warmup_s + b.step_s
        stop = asyncio.Event()

        async def poll() -> None:
            while not stop.is_set():
                try:
                    models = (await client.get(f"{url}/health", timeout=10)).json()["models"]
                    now = time.monotonic() - t0
                    for alias in POLICIES:
                        samples.append((now, alias, int(models[alias].get("replicas", 0))))
                except Exception:  # noqa: BLE001 — a missed poll is a gap in the timeline
                    pass
                await asyncio.sleep(1.0)

        async def one(s: Sent) -> None:
            await asyncio.sleep(max(0.0, t0 + s.at - time.monotonic()))
            try:
                r = await client.post(f"{url}/v1/chat/completions", headers={"x-vsr-allow-fallback": "false"},
                                      json={"model": s.alias + CLASSES[s.task][0],
                                            "messages": [{"role": "user", "content": f"{s.task} request"}]})
                s.status = r.status_code
            except Exception:  # noqa: BLE001 — a transport failure is a failed request
                s.status = -1
            s.done = time.monotonic() - t0

        poller = asyncio.create_task(poll())
        tasks = []
        for at, task in plan:
            for alias in POLICIES:
                s = Sent(alias, task, at)
                sent.append(s)
                tasks.append(asyncio.create_task(one(s)))
        await asyncio.sleep(end)
        await asyncio.gather(*tasks)
        stop.set()
        await poller
    return sent, samples, end


def run_variant(url_base: str, b: BenchSettings, round_no: int, timing: str, discipline: str) -> list[RunResult]:
    import httpx
    from ray import serve

    from serve_app.app import build_app

    name = f"bench{round_no}{timing[:2]}{discipline[:2]}"
    serve.run(build_app(bench_args(b, timing, discipline)), name=name, route_prefix=f"/{name}")
    url = f"{url_base}/{name}"
    deadline = time.monotonic() + 300
    while True:   # direct aliases need no routing: wait for every model replica, not "ready"
        try:
            models = httpx.get(f"{url}/health", timeout=10).json()["models"]
            if all(models[a].get("replicas") == 1 for a in POLICIES):
                break
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} did not come up")
        time.sleep(1)
    try:
        sent, samples, _ = asyncio.run(_drive(url, b, arrivals(b)))
    finally:
        serve.delete(name)
    results = []
    for alias, policy in POLICIES.items():
        timeline = [(round(t - b.warmup_s, 1), n) for t, a, n in samples if a == alias]
        results.append(RunResult(round_no, timing, discipline, policy, alias,
                                 reaction(timeline, 2), reaction(timeline, b.max_replicas),
                                 max((n for _, n in timeline), default=0),
                                 class_stats([s for s in sent if s.alias == alias], b.warmup_s), timeline))
    return results


# --------------------------------------------------------------------------- report


def _spread(values: Sequence[Optional[float]], unit: str = "") -> str:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return "never"
    if len(vals) == 1:
        return f"{vals[0]:.0f}{unit}" if unit == " ms" else f"{vals[0]:.1f}{unit}"
    fmt = (lambda v: f"{v:.0f}") if unit == " ms" else (lambda v: f"{v:.1f}")
    missing = len(values) - len(vals)
    extra = f", {missing}× never" if missing else ""
    return f"{fmt(statistics.median(vals))}{unit} ({fmt(min(vals))}–{fmt(max(vals))}{extra})"


def report(doc: dict[str, Any]) -> str:
    runs = [RunResult(**{**r, "timeline": [tuple(p) for p in r["timeline"]]}) for r in doc["runs"]]
    rounds = sorted({r.round for r in runs})
    b = BenchSettings(**doc["settings"])
    lines = ["# Autoscaling benchmark: queue-depth vs ongoing-requests, per priority class",
             "",
             f"Rounds: {len(rounds)}; figures are the median over rounds (min–max). "
             f"Machine: {doc['machine']}. Command(s): " + "; ".join(f"`{c}`" for c in doc["commands"]) + ".",
             "",
             f"Set-up: two identical copies of the simulated qwen-72b ({b.slots} slots, ≈{b.service_s:.2f} s a "
             f"request, max {b.max_replicas} replicas, queue-depth target {b.target_queue_per_replica:g} "
             f"waiting/replica, Ray target_ongoing_requests {b.slots}); the same open-loop Poisson arrivals "
             f"to both: {b.base_load:g} × one replica's capacity for {b.warmup_s:g} s, then {b.load:g} × the "
             f"capacity at {b.max_replicas} replicas ({b.rate(b.load, b.max_replicas):.2f} req/s per copy) for "
             f"{b.step_s:g} s; classes chat {b.mix_chat:.0%} (priority 0), code and reasoning "
             f"{(1 - b.mix_chat) / 2:.0%} each (priority 2 and 3; all 0 in the FIFO runs). Latency of the "
             f"requests arriving during the step.", ""]
    same = timing_of(b, "same", "queue_depth")
    shipped_q, shipped_r = horizon_default_timing(), ray_default_timing()

    def timing_text(t: dict[str, float]) -> str:
        return (f"upscale {t['upscale_delay_s']:g} s, downscale {t['downscale_delay_s']:g} s, look-back "
                f"{t['look_back_period_s']:g} s, metrics every {t['metrics_interval_s']:g} s")

    def table(timing: str, discipline: str, title: str) -> None:
        lines.append(f"## {title}")
        lines.append("")
        lines.append("| policy | reaction: step → 2nd replica | → max replicas | class | requests (failed) | "
                     "p50 | p95 |")
        lines.append("|---|---:|---:|---|---:|---:|---:|")
        for policy in POLICIES.values():
            mine = [r for r in runs if (r.timing, r.discipline, r.policy) == (timing, discipline, policy)]
            if not mine:
                continue
            first = True
            for cls in [*CLASSES, "low (code+reasoning)"]:
                n = sum(r.classes[cls]["n"] for r in mine)
                failed = sum(r.classes[cls]["failed"] for r in mine)
                lines.append(
                    f"| {POLICY_LABEL[policy] if first else ''} | "
                    f"{_spread([r.reaction_s for r in mine], ' s') if first else ''} | "
                    f"{_spread([r.reaction_max_s for r in mine], ' s') if first else ''} | {cls} | {n} ({failed}) | "
                    f"{_spread([r.classes[cls]['p50_ms'] for r in mine], ' ms')} | "
                    f"{_spread([r.classes[cls]['p95_ms'] for r in mine], ' ms')} |")
                first = False
        lines.append("")

    table("same", "priority", f"Headline: the same delays for both policies ({timing_text(same)}), priorities on")
    table("shipped", "priority", "Beside it, as shipped: queue-depth with Horizon's defaults "
          f"({timing_text(shipped_q)}), Ray's policy with Ray Serve's ({timing_text(shipped_r)})")
    table("same", "fifo", "FIFO baseline (same delays, every task type one priority class)")

    lines.append("## Priority while scaling: high-class (chat) p95, priority ÷ FIFO (target ≤ 0.7)")
    lines.append("")
    lines.append("| policy | per round | median |")
    lines.append("|---|---|---:|")
    for policy in POLICIES.values():
        ratios = []
        for rnd in rounds:
            pr = next((r for r in runs if (r.round, r.timing, r.discipline, r.policy) == (rnd, "same", "priority", policy)), None)
            ff = next((r for r in runs if (r.round, r.timing, r.discipline, r.policy) == (rnd, "same", "fifo", policy)), None)
            if pr and ff and ff.classes[HIGH]["p95_ms"] > 0:
                ratios.append(pr.classes[HIGH]["p95_ms"] / ff.classes[HIGH]["p95_ms"])
        if ratios:
            lines.append(f"| {POLICY_LABEL[policy]} | {', '.join(f'{x:.2f}' for x in ratios)} | "
                         f"{statistics.median(ratios):.2f} |")
    lines.append("")
    lines.append("## Replicas over time (seconds since the step: running replicas), every run")
    lines.append("")
    for r in sorted(runs, key=lambda r: (r.timing, r.discipline, r.policy, r.round)):
        changes, last = [], None
        for t, n in r.timeline:
            if n != last:
                changes.append(f"{t:+.0f}s:{n}")
                last = n
        lines.append(f"- {r.timing}/{r.discipline} {POLICY_LABEL[r.policy]}, round {r.round}: {' → '.join(changes)}")
    return "\n".join(lines) + "\n"


def machine() -> str:
    cpus = os.cpu_count()
    try:
        load = ", load average %.1f" % os.getloadavg()[0]
    except OSError:
        load = ""
    import ray

    return f"{platform.node()} ({platform.machine()}, {cpus} CPUs{load}), Python {platform.python_version()}, Ray {ray.__version__}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--results", default="loadtests/results/bench_autoscaling.json")
    p.add_argument("--append", action="store_true", help="add rounds to an existing results file")
    p.add_argument("--report", action="store_true", help="only print the report of --results")
    p.add_argument("--variants", default=",".join(f"{t}/{d}" for t, d in VARIANTS))
    for name, value in asdict(BenchSettings()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    results = Path(args.results)
    if args.report:
        text = report(json.loads(results.read_text()))
        print(text)
        results.with_suffix(".md").write_text(text, encoding="utf-8")
        return 0
    b = BenchSettings(**{k: getattr(args, k) for k in asdict(BenchSettings())})
    variants = [tuple(v.split("/")) for v in args.variants.split(",")]
    doc: dict[str, Any] = {"settings": asdict(b), "machine": "", "commands": [], "runs": []}
    if args.append and results.exists():
        doc = json.loads(results.read_text())
        if doc["settings"] != asdict(b):
            raise SystemExit("--append needs the settings of the existing results file")
    first_round = 1 + max((r["round"] for r in doc["runs"]), default=0)

    apply_serve_env(os.environ, free_haproxy_ports=True)  # before ray.serve is imported
    import ray
    from ray import serve

    port = free_port()
    ray.init(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip()
        doc["machine"] = machine()
        doc["commands"].append(f"python loadtests/bench_autoscaling.py {' '.join(argv or sys.argv[1:])} (commit {commit})")
        for i in range(args.rounds):
            rnd = first_round + i
            order = rotated(variants, rnd)
            for timing, discipline in order:
                print(f"round {rnd}: {timing}/{discipline} ...", flush=True)
                for r in run_variant(f"http://127.0.0.1:{port}", b, rnd, timing, discipline):
                    doc["runs"].append(asdict(r))
                    print(f"  {r.policy}: reaction {r.reaction_s} s, max {r.max_replicas}, "
                          f"chat p95 {r.classes[HIGH]['p95_ms']} ms, low p95 "
                          f"{r.classes['low (code+reasoning)']['p95_ms']} ms", flush=True)
                results.parent.mkdir(parents=True, exist_ok=True)
                results.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    finally:
        serve.shutdown()
        ray.shutdown()
    text = report(doc)
    results.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
