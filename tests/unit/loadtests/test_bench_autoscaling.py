"""The autoscaling benchmark's pure parts: the profile of each variant, the arrivals, the
statistics and the report (the runs themselves need Ray)."""

import importlib.util
import sys
from pathlib import Path

import pytest

from serve_app.autoscaling.options import scaling_options
from serve_app.config.loader import parse_config
from serve_app.resilience.admission import PriorityAdmission

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_autoscaling", ROOT / "loadtests" / "bench_autoscaling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_autoscaling"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_same_timing_gives_two_copies_that_differ_only_in_policy(bench):
    b = bench.BenchSettings()
    cfg = parse_config(bench.bench_args(b, "same", "priority"))
    q, d = cfg.model(bench.QUEUE_ALIAS), cfg.model(bench.DEFAULT_ALIAS)
    assert q.scaling.policy == "queue_depth" and d.scaling.policy == "ongoing_requests"
    assert q.simulated == d.simulated and q.simulated.max_num_seqs == b.slots
    assert q.scaling.model_dump(exclude={"policy"}) == d.scaling.model_dump(exclude={"policy"})
    qa, da = scaling_options(q)["autoscaling_config"], scaling_options(d)["autoscaling_config"]
    assert "policy" in qa and "policy" not in da
    assert da["target_ongoing_requests"] == b.slots and da["upscale_delay_s"] == b.upscale_delay_s
    # Three task types share each engine (one admission line, three priority classes).
    assert cfg.model("qwen-72b-code").shares_engine_with == "qwen-72b"
    assert cfg.resilience.priority_of("chat") == 0 and cfg.resilience.priority_of("reasoning") == 3
    # The queue-depth copy's line sends its slots; Ray's policy must see what it scales on.
    assert PriorityAdmission.from_config(cfg, bench.QUEUE_ALIAS).capacity == b.slots
    assert PriorityAdmission.from_config(cfg, bench.DEFAULT_ALIAS).capacity == 4 * b.slots


def test_fifo_puts_every_class_in_one_line_and_shipped_uses_each_policys_defaults(bench):
    from ray.serve.config import AutoscalingConfig

    from serve_app.config.models import ScalingSettings

    b = bench.BenchSettings()
    fifo = parse_config(bench.bench_args(b, "same", "fifo"))
    assert {fifo.resilience.priority_of(t) for t in ("chat", "code", "reasoning", None)} == {0}
    shipped = parse_config(bench.bench_args(b, "shipped", "priority"))
    da = scaling_options(shipped.model(bench.DEFAULT_ALIAS))["autoscaling_config"]
    q = shipped.model(bench.QUEUE_ALIAS).scaling
    for key in ("upscale_delay_s", "downscale_delay_s", "look_back_period_s", "metrics_interval_s"):
        assert da[key] == getattr(AutoscalingConfig(), key), key
        assert getattr(q, key) == getattr(ScalingSettings(), key), key
    with pytest.raises(ValueError):
        bench.bench_args(b, "fast", "priority")


def test_arrivals_step_to_the_load_at_max_replicas_and_repeat_exactly(bench):
    b = bench.BenchSettings(warmup_s=10, step_s=200)
    plan = bench.arrivals(b)
    assert plan == bench.arrivals(b)
    step = [t for t, _ in plan if t >= b.warmup_s]
    assert len(step) / b.step_s == pytest.approx(b.rate(b.load, b.max_replicas), rel=0.15)
    assert b.rate(b.load, b.max_replicas) == pytest.approx(0.9 * 3 * 2 / b.service_s)
    share = sum(1 for _, task in plan if task == "chat") / len(plan)
    assert share == pytest.approx(b.mix_chat, abs=0.06)


def test_statistics_and_the_report(bench):
    Sent = bench.Sent
    sent = [Sent("qwen-72b", "chat", 12.0, 12.5, 200), Sent("qwen-72b", "chat", 13.0, 14.0, 200),
            Sent("qwen-72b", "code", 14.0, 20.0, 200), Sent("qwen-72b", "reasoning", 15.0, 15.0, 503),
            Sent("qwen-72b", "chat", 5.0, 9.0, 200)]                 # before the step: excluded
    stats = bench.class_stats(sent, step_at=10.0)
    assert stats["chat"]["n"] == 2 and stats["chat"]["p50_ms"] == pytest.approx(750.0)
    assert stats["low (code+reasoning)"] == {"n": 2, "failed": 1, "p50_ms": 6000.0, "p95_ms": 6000.0}
    timeline = [(-1.0, 1), (0.0, 1), (4.0, 2), (9.0, 3)]
    assert bench.reaction(timeline, 2) == 4.0 and bench.reaction(timeline, 3) == 9.0
    assert bench.reaction(timeline, 4) is None

    b = bench.BenchSettings()

    def run(rnd, discipline, policy, chat_p95):
        classes = {c: {"n": 10, "failed": 0, "p50_ms": 100.0, "p95_ms": chat_p95 if c == "chat" else 900.0}
                   for c in [*bench.CLASSES, "low (code+reasoning)"]}
        return {"round": rnd, "timing": "same", "discipline": discipline, "policy": policy,
                "alias": "x", "reaction_s": 5.0, "reaction_max_s": 9.0, "max_replicas": 3,
                "classes": classes, "timeline": timeline}

    doc = {"settings": {**bench.asdict(b)}, "machine": "test box", "commands": ["python bench"],
           "runs": [run(r, d, p, 300.0 if d == "priority" else 1000.0)
                    for r in (1, 2, 3) for d in ("priority", "fifo") for p in ("queue_depth", "ongoing_requests")]}
    text = bench.report(doc)
    assert "Rounds: 3" in text and "test box" in text and "`python bench`" in text
    assert "| queue-depth | 5.0 s (5.0–5.0) | 9.0 s (9.0–9.0) | chat | 30 (0) | 100 ms (100–100) | 300 ms (300–300) |" in text
    assert "| queue-depth | 0.30, 0.30, 0.30 | 0.30 |" in text
    assert "-1s:1 → +4s:2 → +9s:3" in text
