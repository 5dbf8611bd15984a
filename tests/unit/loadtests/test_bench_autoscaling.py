"""The benchmark's pure parts (the run itself needs Ray and is the lead's)."""

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

from loadtests.lib.plots import ReplicaSample
from loadtests.lib.timing import RequestRecord
from serve_app.autoscaling.options import scaling_options
from serve_app.config.loader import horizon_args, parse_config

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_autoscaling", ROOT / "loadtests" / "bench_autoscaling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_autoscaling"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_profile_has_two_identical_copies_differing_only_in_policy(bench):
    doc = bench.bench_profile(yaml.safe_load((ROOT / "configs" / "sim.yaml").read_text()), bench.BenchSettings())
    cfg = parse_config(horizon_args(doc))
    q, d = cfg.model(bench.QUEUE_ALIAS), cfg.model(bench.DEFAULT_ALIAS)
    assert q.scaling.policy == "queue_depth" and d.scaling.policy == "ongoing_requests"
    assert q.simulated == d.simulated and q.simulated.max_num_seqs == 4
    assert q.scaling.model_dump(exclude={"policy"}) == d.scaling.model_dump(exclude={"policy"})
    qa, da = scaling_options(q)["autoscaling_config"], scaling_options(d)["autoscaling_config"]
    assert "policy" in qa and "policy" not in da
    assert da["target_ongoing_requests"] == 4 and da["upscale_delay_s"] == 3.0


def test_reaction_time_and_step_statistics(bench):
    step = 100.0
    samples = [ReplicaSample(t, "qwen-72b", 1 if t < 106 else 2) for t in range(95, 120)]
    samples += [ReplicaSample(t, "qwen-72b-ongoing", 1 if t < 112 else 3) for t in range(95, 120)]
    assert bench.reaction_time(samples, "qwen-72b", step) == pytest.approx(6.0)
    assert bench.reaction_time(samples, "qwen-72b-ongoing", step) == pytest.approx(12.0)
    assert bench.reaction_time([s for s in samples if s.t < 105], "qwen-72b", step) is None

    def rec(alias, start, e2el, ok=True):
        return RequestRecord(start=start, end=start + e2el, category="chat", stream=False, fusion=False,
                             requested_model=alias, status=200 if ok else 503, ok=ok)
    records = [rec("qwen-72b", 90, 9.0)] + [rec("qwen-72b", 100 + i, 1.0 + i / 10) for i in range(10)]
    records.append(rec("qwen-72b", 105, 1.0, ok=False))
    r = bench.policy_result(records, samples, "qwen-72b", "queue-depth", step)
    assert (r.requests, r.failed, r.max_replicas) == (11, 1, 2)
    assert r.p95_step_ms == pytest.approx(1855.0)  # the pre-step 9 s request is excluded
    other = bench.policy_result(records, samples, "qwen-72b-ongoing", "default", step)
    text = bench.table([r, other], bench.BenchSettings())
    assert "| queue-depth | qwen-72b | 6.0 s |" in text and "| default | qwen-72b-ongoing | 12.0 s |" in text
    assert "ratio queue-depth / default: 0.50" in text


def test_defaults_timing_gives_each_policy_its_shipped_delays(bench):
    settings = bench.BenchSettings(timing="defaults")
    doc = bench.bench_profile(yaml.safe_load((ROOT / "configs" / "sim.yaml").read_text()), settings)
    cfg = parse_config(horizon_args(doc))
    q, d = cfg.model(bench.QUEUE_ALIAS), cfg.model(bench.DEFAULT_ALIAS)
    from ray.serve.config import AutoscalingConfig
    from serve_app.config.models import ScalingSettings

    ray_defaults, ours = AutoscalingConfig(), ScalingSettings()
    da = scaling_options(d)["autoscaling_config"]
    for key in ("upscale_delay_s", "downscale_delay_s", "look_back_period_s", "metrics_interval_s"):
        assert da[key] == getattr(ray_defaults, key), key
        assert getattr(q.scaling, key) == getattr(ours, key), key
    # Everything else is still identical: same engine, same target, same bounds.
    assert q.simulated == d.simulated
    assert da["target_ongoing_requests"] == 4
    assert "shipped timing" in bench.table([bench.PolicyResult("qwen-72b", "queue-depth", 5.0, 1, 1, 2, 1, 0),
                                            bench.PolicyResult("qwen-72b-ongoing", "default", 40.0, 1, 1, 2, 1, 0)],
                                           settings)
    with pytest.raises(ValueError):
        bench.bench_profile(yaml.safe_load((ROOT / "configs" / "sim.yaml").read_text()),
                            bench.BenchSettings(timing="fast"))
