from autoscaling_fakes import FakeContext, Sample, engine_reports

from deployments.engine_stats import engine_autoscaling_stats
from serve_app.autoscaling.signals import read_queue_signal


def test_without_engine_reports_waiting_is_estimated_from_slots():
    # 2 replicas x 8 slots; 20 ongoing at replicas, 5 more queued at handles.
    ctx = FakeContext(current_num_replicas=2, total_num_requests=25, total_queued_requests=5)
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert not sig.engine_reported
    assert sig.engine_running == 16 and sig.engine_waiting == 4 and sig.queued_at_handles == 5
    assert sig.waiting == 9 and sig.demand == 25


def test_below_capacity_nothing_waits():
    ctx = FakeContext(current_num_replicas=1, total_num_requests=6)
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert sig.waiting == 0 and sig.demand == 6


def test_engine_reports_use_each_replicas_newest_sample():
    ctx = engine_reports(FakeContext(current_num_replicas=2, total_num_requests=30, total_queued_requests=2),
                         waiting=[3, 5], running=[4, 4])
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert sig.engine_reported
    # Engine waits 8 though Ray's averaged ongoing count would suggest 12: engines know better.
    assert sig.engine_waiting == 8 and sig.engine_running == 8 and sig.waiting == 10


def test_stale_engine_samples_fall_back_to_the_window_average():
    ctx = engine_reports(FakeContext(current_num_replicas=1, total_num_requests=10), waiting=[7], running=[8],
                         at=1_000.0 - 60)
    ctx.aggregated_metrics = {"engine_waiting": {"r0": 1.5}}
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert sig.engine_reported and sig.engine_waiting == 1.5
    # engine_running was stale and has no average: derived from the ongoing count.
    assert sig.engine_running == 8.5


def test_a_replica_that_has_not_reported_makes_engine_figures_unknown():
    ctx = FakeContext(current_num_replicas=2, total_num_requests=20)
    ctx.raw_metrics = {"engine_waiting": {"r0": [Sample(1_000.0, 0.0)]}}  # r1 just started
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert not sig.engine_reported
    assert sig.engine_waiting == 4  # 20 ongoing over 16 slots


def test_ray_windows_disagreeing_never_give_negative_counts():
    ctx = FakeContext(current_num_replicas=1, total_num_requests=2.0, total_queued_requests=2.4)
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert sig.engine_running == 0 and sig.engine_waiting == 0 and sig.queued_at_handles == 2.4


def test_engine_stats_become_numeric_custom_metrics():
    assert engine_autoscaling_stats({"alias": "qwen-72b", "waiting": 3, "running": 8, "served": 10,
                                     "max_num_seqs": 8}) == {"engine_waiting": 3.0, "engine_running": 8.0}
    assert engine_autoscaling_stats({"num_requests_waiting": 2.0, "num_requests_running": 5}) == {
        "engine_waiting": 2.0, "engine_running": 5.0}
    # Unknown counts are left out rather than reported as a false zero; bools are not counts.
    assert engine_autoscaling_stats({"waiting": "3", "running": True}) == {}
    assert engine_autoscaling_stats({}) == {}


def _gateway(ctx, values, at=None):
    t = ctx.current_time if at is None else at
    ctx.raw_metrics = {**(ctx.raw_metrics or {}),
                       "gateway_waiting": {r: [Sample(t - 1, 0.0), Sample(t, v)]
                                           for r, v in zip(ctx.running_replicas, values)}}
    return ctx


def test_requests_waiting_at_the_gateway_count_as_waiting():
    # The engine is exactly full (its slots are the admission capacity): only the gateway queues.
    ctx = _gateway(engine_reports(FakeContext(current_num_replicas=1, total_num_requests=8),
                                  waiting=[0], running=[8]), [32])
    sig = read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3)
    assert sig.gateway_waiting == 32 and sig.waiting == 32 and sig.demand == 40


def test_every_replica_relays_the_same_gateway_total_so_it_is_not_summed():
    ctx = _gateway(engine_reports(FakeContext(current_num_replicas=2, total_num_requests=16),
                                  waiting=[0, 0], running=[8, 8]), [30, 28])
    assert read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3).gateway_waiting == 30


def test_a_stale_or_missing_gateway_report_is_no_backlog():
    ctx = _gateway(engine_reports(FakeContext(current_num_replicas=1, total_num_requests=8),
                                  waiting=[0], running=[8]), [50], at=1_000.0 - 60)
    assert read_queue_signal(ctx, replica_slots=8, metrics_max_age_s=3).gateway_waiting == 0
    # Without engine reports either, the slot estimate still adds the gateway's figure.
    plain = _gateway(FakeContext(current_num_replicas=1, total_num_requests=8), [12])
    sig = read_queue_signal(plain, replica_slots=8, metrics_max_age_s=3)
    assert not sig.engine_reported and sig.waiting == 12
