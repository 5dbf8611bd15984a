"""The breaker state machine under a fake clock (SPEC §6 figures: 5 / 30 s / 10 s)."""

from __future__ import annotations

import pytest

from serve_app.config.resilience import BreakerSettings
from serve_app.errors import (ContextLengthExceeded, InvalidRequest, ModelUnavailable, RateLimited,
                              UpstreamError, UpstreamTimeout)
from serve_app.resilience.breaker import CircuitBreaker, LocalBreakerStore, is_model_failure

from resilience_fakes import FakeClock

SETTINGS = BreakerSettings(failure_threshold=5, window_s=30, probe_interval_s=10,
                           half_open_max_inflight=1, recovery_steps=3)


def make(settings: BreakerSettings = SETTINGS):
    clock = FakeClock()
    store = LocalBreakerStore(settings, clock)
    return CircuitBreaker("r1-distill", store), store, clock


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        permit = breaker.try_acquire()
        assert permit is not None
        permit.failure()


def test_five_consecutive_failures_open_it_and_four_do_not():
    breaker, _, clock = make()
    fail(breaker, 4)
    assert breaker.state().state == "closed"
    clock.advance(1)
    fail(breaker, 1)
    assert breaker.state().state == "open"
    assert breaker.try_acquire() is None
    assert not breaker.allows()


def test_a_success_resets_the_streak():
    breaker, _, _ = make()
    fail(breaker, 4)
    breaker.try_acquire().success()
    fail(breaker, 4)
    assert breaker.state().state == "closed"
    assert breaker.state().consecutive_failures == 4


def test_window_expiry_resets_the_streak():
    breaker, _, clock = make()
    fail(breaker, 4)
    clock.advance(31)  # the streak began more than window_s ago
    fail(breaker, 1)
    st = breaker.state()
    assert st.state == "closed" and st.consecutive_failures == 1
    fail(breaker, 3)
    assert breaker.state().state == "closed"
    fail(breaker, 1)
    assert breaker.state().state == "open"


def test_probe_after_interval_then_half_open_is_limited():
    breaker, _, clock = make()
    fail(breaker, 5)
    clock.advance(9.9)
    assert breaker.state().state == "open"
    assert breaker.retry_after_s() == pytest.approx(0.1, abs=1e-6)
    clock.advance(0.1)
    assert breaker.state().state == "half_open"
    first = breaker.try_acquire()
    assert first is not None and first.trial
    # Step 0 admits a single trial per replica.
    assert breaker.try_acquire() is None
    assert not breaker.allows()


def test_gradual_recovery_to_closed():
    breaker, _, clock = make()
    fail(breaker, 5)
    clock.advance(10)
    limits = []
    for step in range(3):
        permits = []
        while (p := breaker.try_acquire()) is not None:
            permits.append(p)
        limits.append(len(permits))
        assert breaker.state().state == "half_open"
        permits[0].success()
        for p in permits[1:]:
            p.release()
    assert limits == [1, 2, 3]
    assert breaker.state().state == "closed"
    # Closed again: no trial limit.
    assert all(breaker.try_acquire() is not None for _ in range(20))


def test_failed_trial_reopens_and_waits_a_full_probe_interval():
    breaker, _, clock = make()
    fail(breaker, 5)
    clock.advance(10)
    trial = breaker.try_acquire()
    trial.failure()
    assert breaker.state().state == "open"
    assert breaker.state().open_count == 2
    clock.advance(9)
    assert breaker.state().state == "open"
    clock.advance(1)
    assert breaker.state().state == "half_open"


def test_neutral_release_frees_a_trial_slot_without_progress():
    breaker, _, clock = make()
    fail(breaker, 5)
    clock.advance(10)
    breaker.try_acquire().release()
    st = breaker.state()
    assert st.state == "half_open" and st.recovery_step == 0
    assert breaker.try_acquire() is not None


def test_late_failures_while_open_do_not_extend_it():
    breaker, store, clock = make()
    permits = [breaker.try_acquire() for _ in range(7)]
    for p in permits[:5]:
        p.failure()
    opened_at = store.get("r1-distill").opened_at
    clock.advance(5)
    for p in permits[5:]:
        p.failure()  # admitted before it opened; they finish late
    assert store.get("r1-distill").opened_at == opened_at


@pytest.mark.parametrize("exc, counts", [
    (UpstreamError("x"), True), (UpstreamTimeout("x"), True), (ModelUnavailable("x"), True),
    (RuntimeError("x"), True), (InvalidRequest("x"), False), (ContextLengthExceeded("x"), False),
    (RateLimited("x"), False),
])
def test_only_model_failures_count(exc, counts):
    assert is_model_failure(exc) is counts
