import datetime as dt

import pytest
from autoscaling_fakes import FakeContext, Sample, engine_reports

from serve_app.autoscaling.policy import (DOWN_SINCE, UP_SINCE, QueueDepthParams, QueueDepthPolicy,
                                          queue_depth_policy, replicas_for_load)
from serve_app.autoscaling.signals import QueueSignal
from serve_app.config.models import ScheduleWindow

T0 = dt.datetime(2025, 3, 4, 12, 0, tzinfo=dt.timezone.utc).timestamp()


def params(**overrides) -> QueueDepthParams:
    values = dict(target_queue_per_replica=2.0, replica_slots=8, min_replicas=1, max_replicas=4,
                  upscale_delay_s=5.0, downscale_delay_s=30.0, scale_to_zero_delay_s=120.0,
                  metrics_max_age_s=3.0)
    values.update(overrides)
    return QueueDepthParams(**values)


def tick(p: QueueDepthParams, *, at: float, replicas: int, demand: float, queued: float = 0.0,
         state: dict | None = None) -> tuple[int, dict]:
    ctx = FakeContext(current_num_replicas=replicas, target_num_replicas=replicas, total_num_requests=demand,
                      total_queued_requests=queued, policy_state=dict(state or {}), current_time=at)
    return queue_depth_policy(ctx, p)


def signal(running: float, waiting: float, engine: bool = False) -> QueueSignal:
    return QueueSignal(queued_at_handles=0, engine_waiting=waiting, engine_running=running, engine_reported=engine)


@pytest.mark.parametrize("demand, replicas", [(0, 0), (1, 1), (10, 1), (11, 2), (20, 2), (21, 3), (40, 4)])
def test_replicas_hold_the_target_queue_once_slots_are_full(demand, replicas):
    # 8 slots + 2 waiting per replica = 10 requests per replica.
    running = min(demand, 8)
    assert replicas_for_load(signal(running, demand - running), params(), current_replicas=1) == replicas


def test_observed_capacity_replaces_slots_when_engines_are_full():
    # KV-cache-bound engines decode 4 each though max_num_seqs is 8: 18 / (4 + 2) = 3.
    assert replicas_for_load(signal(8, 10, engine=True), params(), current_replicas=2) == 3
    # Without engine reports the configured slots stand: 18 / 10 = 2.
    assert replicas_for_load(signal(8, 10, engine=False), params(), current_replicas=2) == 2


def test_requests_queued_at_the_handles_alone_do_not_shrink_the_capacity():
    # Measured on a zero-latency model at 64 in flight: the router held 8.4 requests on
    # average while picking a replica; the engine, sampled between requests, ran none and had
    # nothing waiting. Its 1,024 slots still stand, so one replica is enough.
    busy_router = QueueSignal(queued_at_handles=8.4, engine_waiting=0, engine_running=0, engine_reported=True)
    assert replicas_for_load(busy_router, params(replica_slots=1024), current_replicas=1) == 1
    # Once the engine itself holds waiting requests, what it decodes is the capacity again.
    full = QueueSignal(queued_at_handles=8.4, engine_waiting=2, engine_running=4, engine_reported=True)
    assert replicas_for_load(full, params(replica_slots=1024), current_replicas=1) == 3


def test_upscale_waits_for_the_delay_and_then_jumps_to_the_need():
    p = params()
    n, state = tick(p, at=T0, replicas=1, demand=35, queued=27)
    assert n == 1 and state[UP_SINCE] == T0
    n, state = tick(p, at=T0 + 4.9, replicas=1, demand=35, queued=27, state=state)
    assert n == 1
    n, state = tick(p, at=T0 + 5.0, replicas=1, demand=35, queued=27, state=state)
    assert n == 4 and UP_SINCE not in state


def test_a_dip_below_target_restarts_the_upscale_delay():
    p = params()
    _, state = tick(p, at=T0, replicas=1, demand=15, queued=7)
    _, state = tick(p, at=T0 + 3, replicas=1, demand=9, state=state)  # queue gone
    assert UP_SINCE not in state
    n, state = tick(p, at=T0 + 6, replicas=1, demand=15, queued=7, state=state)
    assert n == 1 and state[UP_SINCE] == T0 + 6


def test_no_scale_up_while_the_queue_is_within_target():
    # 1 replica: 8 decoding + 2 waiting is exactly the target.
    n, state = tick(params(upscale_delay_s=0), at=T0, replicas=1, demand=10, queued=2)
    assert n == 1 and UP_SINCE not in state


def test_downscale_waits_and_goes_to_the_highest_need_seen_meanwhile():
    p = params()
    n, state = tick(p, at=T0, replicas=4, demand=5)          # needs 1
    assert n == 4 and state[DOWN_SINCE] == T0
    n, state = tick(p, at=T0 + 10, replicas=4, demand=25, state=state)  # needs 3: still below 4
    n, state = tick(p, at=T0 + 20, replicas=4, demand=5, state=state)
    assert n == 4
    n, state = tick(p, at=T0 + 30, replicas=4, demand=5, state=state)
    assert n == 3 and DOWN_SINCE not in state


def test_load_returning_cancels_a_pending_downscale():
    p = params()
    _, state = tick(p, at=T0, replicas=2, demand=5)
    _, state = tick(p, at=T0 + 20, replicas=2, demand=20, state=state)
    assert DOWN_SINCE not in state
    n, _ = tick(p, at=T0 + 40, replicas=2, demand=5, state=state)
    assert n == 2  # the delay starts over at T0 + 40


def test_max_replicas_caps_the_decision():
    n, _ = tick(params(upscale_delay_s=0), at=T0, replicas=1, demand=500, queued=400)
    assert n == 4


def test_cold_model_scales_to_zero_only_when_idle_for_its_delay():
    p = params(min_replicas=0, downscale_delay_s=10.0, scale_to_zero_delay_s=60.0)
    n, state = tick(p, at=T0, replicas=1, demand=0)
    assert n == 1
    n, state = tick(p, at=T0 + 30, replicas=1, demand=0, state=state)
    assert n == 1  # downscale_delay_s has passed, scale_to_zero_delay_s has not
    n, state = tick(p, at=T0 + 60, replicas=1, demand=0, state=state)
    assert n == 0
    # One request in flight keeps a replica.
    n, _ = tick(p, at=T0 + 60, replicas=1, demand=0.5, state={DOWN_SINCE: T0})
    assert n == 1


def test_a_schedule_window_raises_the_floor_without_the_upscale_delay():
    window = ScheduleWindow(start="11:00", end="13:00", min_replicas=2)
    p = params(min_replicas=0, upscale_delay_s=300.0, schedule=(window,))
    n, state = tick(p, at=T0, replicas=0, demand=0)
    assert n == 2 and UP_SINCE not in state
    # Load above the window's minimum still waits for the upscale delay.
    n, state = tick(p, at=T0 + 1, replicas=2, demand=45, queued=29, state=state)
    assert n == 2 and UP_SINCE in state


def test_after_the_window_closes_replicas_drain_with_the_normal_delays():
    window = ScheduleWindow(start="11:00", end="12:00", min_replicas=2)  # closed at T0 (12:00)
    p = params(min_replicas=0, downscale_delay_s=30.0, scale_to_zero_delay_s=60.0, schedule=(window,))
    n, state = tick(p, at=T0, replicas=2, demand=0)
    assert n == 2
    n, state = tick(p, at=T0 + 60, replicas=2, demand=0, state=state)
    assert n == 1  # Serve reaches zero only from one replica...
    n, state = tick(p, at=T0 + 61, replicas=1, demand=0, state=state)
    assert n == 0 and DOWN_SINCE not in state  # ...and the next tick does not wait again


def test_engine_reported_waiting_drives_scaling_when_handles_see_no_queue():
    # Handles see nothing queued (max_ongoing_requests is generous), but the engines say
    # 12 requests wait behind 8 running: 20 / 10 = 2 replicas.
    ctx = engine_reports(FakeContext(current_num_replicas=1, target_num_replicas=1, total_num_requests=20,
                                     current_time=T0), waiting=[12], running=[8])
    n, _ = queue_depth_policy(ctx, params(upscale_delay_s=0))
    assert n == 2


def test_policy_state_keeps_what_ray_put_there():
    ctx = FakeContext(current_num_replicas=1, target_num_replicas=1, total_num_requests=3, current_time=T0,
                      policy_state={"__decision_counters": 2, "custom": "x"})
    _, state = queue_depth_policy(ctx, params())
    assert state["__decision_counters"] == 2 and state["custom"] == "x"


def test_policy_class_takes_json_kwargs_and_round_trips():
    window = ScheduleWindow(start="22:00", end="06:00", min_replicas=1)
    p = params(schedule=(window,))
    kwargs = p.to_kwargs()
    import json

    assert QueueDepthParams.from_kwargs(json.loads(json.dumps(kwargs))) == p
    policy = QueueDepthPolicy(**kwargs)
    n, _ = policy(FakeContext(current_num_replicas=1, target_num_replicas=1, total_num_requests=1, current_time=T0))
    assert n == 1


def test_invalid_params_are_rejected():
    with pytest.raises(ValueError):
        params(min_replicas=5, max_replicas=2)
    with pytest.raises(ValueError):
        params(target_queue_per_replica=0)


def test_a_backlog_held_at_the_gateway_scales_the_model_straight_to_its_maximum():
    """The issue's measurement: engine full (8 of 8 slots), 32 waiting in the ingress line.
    Without the gateway's figure the policy saw 8 requests and kept one replica."""
    p = params(max_replicas=3, upscale_delay_s=5.0)
    ctx = engine_reports(FakeContext(current_num_replicas=1, target_num_replicas=1, total_num_requests=8,
                                     current_time=T0), waiting=[0], running=[8])
    ctx.raw_metrics["gateway_waiting"] = {"r0": [Sample(T0, 32.0)]}
    first, state = queue_depth_policy(ctx, p)
    assert first == 1 and UP_SINCE in state                  # the wish must last the upscale delay
    ctx.current_time, ctx.policy_state = T0 + 5.0, state
    for series in ctx.raw_metrics.values():
        for samples in series.values():
            samples.append(Sample(T0 + 5.0, samples[-1].value))
    decided, state = queue_depth_policy(ctx, p)
    assert decided == 3                                       # 40 / (8 + 2) = 4, capped at 3
    assert state["queue_depth.last_signal"]["gateway_waiting"] == 32
