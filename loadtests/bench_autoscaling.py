"""Queue-depth autoscaling vs Ray Serve's default ongoing-requests policy, side by side.

One run, one deployment of the simulated fleet with two identical copies of one model:
``qwen-72b`` scaled by the queue-depth policy and ``qwen-72b-ongoing`` by Ray Serve's default
policy (``target_ongoing_requests`` = the engine's decoding slots, stated in the table; Ray's own
default of 2 would scale on almost any traffic). Both copies get the same closed-loop load, sent
straight to their alias, stepping from ``--base-users`` to ``--users`` per copy.

Two timing set-ups (``--timing``):

* ``same`` — both get the benchmark's delays, metrics interval and look-back window; only the
  decision rule differs.
* ``defaults`` — each policy as it ships: the queue-depth policy with this project's scaling
  defaults (upscale delay 5 s, look-back 10 s, metrics every 1 s), Ray's policy with Ray Serve's
  ``AutoscalingConfig`` defaults (upscale delay 30 s, look-back 30 s, metrics every 10 s). Ray's
  long delay is there because ongoing requests rise with any healthy load; a queue only forms
  when replicas are saturated, which is what lets the queue-depth policy act sooner.

Measured per copy:
* reaction time — from the step to the first /health poll showing a second RUNNING replica
  (the extra replica is serving);
* P95 E2EL of requests started during the step;
* the replica count reached.

Target (issue 7): the queue-depth reaction time at most half the default's.

Run (needs Ray; deploys through ``loadtests.runner.start_profile``):

    python loadtests/bench_autoscaling.py --out loadtests/results/bench-autoscaling

or deploy ``--write-profile`` output yourself (``serve run <out>/bench_profile.yaml``) and pass
``--url http://127.0.0.1:8000``. Writes ``bench.md`` (table) and ``bench_autoscaling.png``.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests import runner  # noqa: E402
from loadtests.lib.plots import ReplicaSample, percentiles_over_time  # noqa: E402
from loadtests.lib.scenarios import Scenario, Stage  # noqa: E402
from loadtests.lib.summary import SLO, percentile  # noqa: E402
from loadtests.lib.timing import RequestRecord  # noqa: E402
from loadtests.lib.traffic import TrafficSettings  # noqa: E402

QUEUE_ALIAS = "qwen-72b"
DEFAULT_ALIAS = "qwen-72b-ongoing"


@dataclass(frozen=True)
class BenchSettings:
    slots: int = 4                 # simulated max_num_seqs of both copies
    latency_scale: float = 0.25    # qwen-72b's SPEC figures x this (≈0.8 s per request)
    max_replicas: int = 3
    upscale_delay_s: float = 3.0
    downscale_delay_s: float = 30.0
    look_back_period_s: float = 10.0
    target_queue_per_replica: float = 2.0
    base_users: int = 2
    users: int = 16
    warmup_s: float = 20.0
    step_s: float = 60.0
    timing: str = "same"           # "same" or "defaults" (see the module docstring)


# Ray Serve 2.60's AutoscalingConfig defaults (ray.serve.config.AutoscalingConfig()).
RAY_DEFAULT_TIMING = {"upscale_delay_s": 30.0, "downscale_delay_s": 600.0, "look_back_period_s": 30.0,
                      "metrics_interval_s": 10.0}
# This project's ScalingSettings defaults (serve_app/config/models.py).
HORIZON_DEFAULT_TIMING = {"upscale_delay_s": 5.0, "downscale_delay_s": 60.0, "look_back_period_s": 10.0,
                          "metrics_interval_s": 1.0}


def bench_profile(doc: dict[str, Any], b: BenchSettings) -> dict[str, Any]:
    """The sim profile (Serve config) with the two copies of ``qwen-72b``."""
    doc = copy.deepcopy(doc)
    args = doc["applications"][0]["args"]
    args["simulation"] = {"latency_scale": b.latency_scale}
    models = args["models"]
    original = next(m for m in models if m["alias"] == QUEUE_ALIAS)
    scaling = {"min_replicas": 1, "max_replicas": b.max_replicas, "max_ongoing_requests": 4 * b.slots,
               "max_queued_requests": -1, "upscale_delay_s": b.upscale_delay_s,
               "downscale_delay_s": b.downscale_delay_s, "look_back_period_s": b.look_back_period_s,
               "metrics_interval_s": 1.0, "target_queue_per_replica": b.target_queue_per_replica,
               "target_ongoing_requests": float(b.slots)}
    if b.timing not in ("same", "defaults"):
        raise ValueError(f"--timing must be 'same' or 'defaults', not {b.timing!r}")
    queue_timing = HORIZON_DEFAULT_TIMING if b.timing == "defaults" else {}
    default_timing = RAY_DEFAULT_TIMING if b.timing == "defaults" else {}
    original["simulated"] = {**original.get("simulated", {}), "max_num_seqs": b.slots}
    original["scaling"] = {**scaling, **queue_timing, "policy": "queue_depth"}
    twin = copy.deepcopy(original)
    twin["alias"] = DEFAULT_ALIAS
    twin["description"] = "Copy of qwen-72b scaled by Ray Serve's default ongoing-requests policy (benchmark)"
    twin["scaling"] = {**scaling, **default_timing, "policy": "ongoing_requests"}
    models.insert(models.index(original) + 1, twin)
    return doc


@dataclass
class PolicyResult:
    alias: str
    policy: str
    reaction_s: Optional[float]
    p95_step_ms: float
    p50_step_ms: float
    max_replicas: int
    requests: int
    failed: int


def reaction_time(samples: Sequence[ReplicaSample], alias: str, step_at: float) -> Optional[float]:
    """Seconds from ``step_at`` (epoch) to the first sample with more replicas than at the step."""
    mine = sorted((s for s in samples if s.model == alias), key=lambda s: s.t)
    before = [s.replicas for s in mine if s.t <= step_at]
    baseline = before[-1] if before else (mine[0].replicas if mine else 0)
    return next((s.t - step_at for s in mine if s.t > step_at and s.replicas > baseline), None)


def policy_result(records: Sequence[RequestRecord], samples: Sequence[ReplicaSample], alias: str,
                  policy: str, step_at: float) -> PolicyResult:
    during = [r for r in records if r.requested_model == alias and r.start >= step_at]
    e2el = [r.e2el_s * 1000 for r in during if r.ok]
    return PolicyResult(alias, policy, reaction_time(samples, alias, step_at), percentile(e2el, 95),
                        percentile(e2el, 50), max((s.replicas for s in samples if s.model == alias), default=0),
                        len(during), sum(1 for r in during if not r.ok))


def table(results: Sequence[PolicyResult], b: BenchSettings) -> str:
    def fmt(v: Optional[float], unit: str) -> str:
        return "never" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f} {unit}"
    lines = ["| policy | deployment | reaction time (step → 2nd replica serving) | P50 E2EL during step | "
             "P95 E2EL during step | max replicas | requests (failed) |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.policy} | {r.alias} | {fmt(r.reaction_s, 's')} | {fmt(r.p50_step_ms, 'ms')} | "
                     f"{fmt(r.p95_step_ms, 'ms')} | {r.max_replicas} | {r.requests} ({r.failed}) |")
    q, d = results[0].reaction_s, results[1].reaction_s
    if q is not None and d is not None and d > 0:
        lines.append(f"\nReaction time ratio queue-depth / default: {q / d:.2f} (target ≤ 0.5).")
    if b.timing == "defaults":
        q, d = HORIZON_DEFAULT_TIMING, RAY_DEFAULT_TIMING
        timing = (f"each policy with its shipped timing: queue-depth upscale delay {q['upscale_delay_s']:g} s, "
                  f"look-back {q['look_back_period_s']:g} s, metrics every {q['metrics_interval_s']:g} s; "
                  f"Ray default policy upscale delay {d['upscale_delay_s']:g} s, look-back "
                  f"{d['look_back_period_s']:g} s, metrics every {d['metrics_interval_s']:g} s")
    else:
        timing = (f"both: upscale delay {b.upscale_delay_s:g} s, look-back {b.look_back_period_s:g} s, "
                  f"metrics interval 1 s")
    lines.append(f"\nSet-up: simulated qwen-72b ×2 (latency scale {b.latency_scale:g}, {b.slots} decoding slots "
                 f"per replica), load {b.base_users}→{b.users} closed-loop users per deployment at "
                 f"{b.warmup_s:g} s, step held {b.step_s:g} s; {timing}; max {b.max_replicas} replicas; "
                 f"queue-depth target {b.target_queue_per_replica:g} waiting/replica; default policy "
                 f"target_ongoing_requests {b.slots}.")
    return "\n".join(lines)


def plot(records: Sequence[RequestRecord], samples: Sequence[ReplicaSample], t0: float, step_at: float,
         out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for alias, label in ((QUEUE_ALIAS, "queue-depth"), (DEFAULT_ALIAS, "ongoing-requests (Ray default)")):
        pts = sorted((s.t - t0, s.replicas) for s in samples if s.model == alias)
        top.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=label)
        lat = percentiles_over_time([r for r in records if r.requested_model == alias], "e2el", 5.0, t0)
        bottom.plot([p.t for p in lat], [p.p95 for p in lat], label=f"{label} P95 E2EL")
    for ax in (top, bottom):
        ax.axvline(step_at - t0, color="grey", linewidth=0.8)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    top.set_ylabel("running replicas")
    bottom.set_ylabel("P95 E2EL (ms, 5 s windows)")
    bottom.set_xlabel("seconds since start (grey: load step)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    import yaml

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="configs/sim.yaml")
    p.add_argument("--url", help="endpoint already serving --write-profile's output (loopback only)")
    p.add_argument("--write-profile", action="store_true", help="only write bench_profile.yaml and exit")
    p.add_argument("--out", default="loadtests/results/bench-autoscaling")
    for name, value in vars(BenchSettings()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    b = BenchSettings(**{k: getattr(args, k) for k in vars(BenchSettings())})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    profile_path = out / "bench_profile.yaml"
    profile_path.write_text(yaml.safe_dump(bench_profile(yaml.safe_load(Path(args.profile).read_text()), b),
                                           sort_keys=False), encoding="utf-8")
    if args.write_profile:
        print(profile_path)
        return 0
    url = args.url or runner.start_profile(str(profile_path))
    scenario = Scenario("step", (Stage(b.warmup_s, 2 * b.base_users, 2 * b.base_users),
                                 Stage(b.warmup_s + b.step_s, 2 * b.users, 2 * b.users)))
    settings = runner.RunSettings(
        url=url, scenario=scenario, out_dir=out, max_requests=100000, slo=SLO(),
        traffic=TrafficSettings(mix={"chat": 1.0}, stream_share=0.5, models=(QUEUE_ALIAS, DEFAULT_ALIAS)),
        title="Autoscaling benchmark: queue-depth vs ongoing-requests")
    result = runner.run_load(settings)
    runner.write_report(result, settings)
    step_at = result.t0 + b.warmup_s
    results = [policy_result(result.records, result.replicas, QUEUE_ALIAS, "queue-depth", step_at),
               policy_result(result.records, result.replicas, DEFAULT_ALIAS, "ongoing-requests (Ray default)",
                             step_at)]
    text = table(results, b)
    png = plot(result.records, result.replicas, result.t0, step_at, out / "bench_autoscaling.png")
    (out / "bench.md").write_text(f"# Autoscaling benchmark\n\n{text}\n\n![bench]({png.name})\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
