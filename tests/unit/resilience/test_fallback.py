"""Fallback chains, the depth limit, fallback_ok, vision, breakers and queues in the chain."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.errors import InvalidRequest, ModelNotFound, ModelUnavailable, RateLimited, UpstreamError
from serve_app.resilience import ResilientFleet, fallback_header
from serve_app.resilience.guarded import CircuitOpen

from resilience_fakes import VISION_MESSAGE, FakeClock, FakeModel, make_config, make_fleet

pytestmark = pytest.mark.asyncio


def fleet_of(*models, resilience=None, **kw):
    fake = make_fleet(*models)
    clock = FakeClock()
    return ResilientFleet(fake, make_config(resilience=resilience, **kw), clock=clock), fake, clock


async def test_primary_serves_with_no_fallback_header():
    rf, fake, _ = fleet_of()
    response, hops = await rf.complete("reasoning", "r1-distill", {"messages": []})
    assert response["model"] == "r1-distill"
    assert [(h.model, h.outcome) for h in hops] == [("r1-distill", "ok")]
    assert fallback_header(hops) is None
    assert fake.calls()["r1-distill"] == 1


async def test_failure_falls_back_one_hop():
    rf, fake, _ = fleet_of(FakeModel("r1-distill", mode="error"))
    response, hops = await rf.complete("reasoning", "r1-distill", {})
    assert response["model"] == "k2"
    assert [(h.model, h.outcome) for h in hops] == [("r1-distill", "error"), ("k2", "ok")]
    assert fallback_header(hops) == "r1-distill:error,k2:ok"
    assert fake.calls() == {"k2": 1, "qwen-72b": 0, "r1-distill": 1, "coder": 0, "minicpm-v": 0}


async def test_depth_limit_holds_no_model_called_beyond_it():
    rf, fake, _ = fleet_of(FakeModel("r1-distill", mode="error"), FakeModel("k2", mode="down"))
    with pytest.raises(ModelUnavailable) as info:
        await rf.complete("reasoning", "r1-distill", {})
    err = info.value
    # Chain is r1-distill -> k2 -> qwen-72b, but one hop only: qwen-72b is never called.
    assert fake.calls() == {"k2": 1, "qwen-72b": 0, "r1-distill": 1, "coder": 0, "minicpm-v": 0}
    assert err.status == 503
    assert "fallback limit (1 hop) was reached" in err.message
    assert [h["model"] for h in err.details["hops"]] == ["r1-distill", "k2"]
    assert err.headers()["Retry-After"]


async def test_configured_deeper_chain_goes_further_and_still_stops():
    rf, fake, _ = fleet_of(FakeModel("r1-distill", mode="error"), FakeModel("k2", mode="error"),
                           resilience={"max_fallback_depth": 2})
    response, hops = await rf.complete("reasoning", "r1-distill", {})
    assert response["model"] == "qwen-72b" and len(hops) == 3
    fake.models["qwen-72b"].mode = "error"
    with pytest.raises(ModelUnavailable) as info:
        await rf.complete("reasoning", "r1-distill", {})
    assert "no other model is configured" in info.value.message
    assert fake.calls()["qwen-72b"] == 2 and fake.calls()["r1-distill"] == 2


async def test_fallback_ok_false_calls_only_the_model_and_keeps_its_error():
    rf, fake, _ = fleet_of(FakeModel("r1-distill", mode="error"))
    with pytest.raises(UpstreamError) as info:
        await rf.complete("reasoning", "r1-distill", {}, fallback_ok=False)
    assert info.value.status == 502
    assert fake.calls()["k2"] == 0 and fake.calls()["r1-distill"] == 1


async def test_model_down_with_no_fallback_is_503():
    rf, fake, _ = fleet_of(FakeModel("coder", mode="down"), resilience={"max_fallback_depth": 0})
    with pytest.raises(ModelUnavailable) as info:
        await rf.complete("code", "coder", {})
    assert info.value.status == 503
    assert fake.calls()["k2"] == 0


async def test_vision_never_falls_back_and_says_send_a_clearer_image():
    rf, fake, _ = fleet_of(FakeModel("minicpm-v", mode="error"))
    with pytest.raises(UpstreamError) as info:
        await rf.complete("vision", "minicpm-v", {})
    assert info.value.message == VISION_MESSAGE
    assert info.value.details["cause"] == "minicpm-v exploded"
    assert sum(fake.calls().values()) == 1


async def test_client_errors_are_not_fallen_back():
    bad = FakeModel("qwen-72b")

    async def reject(request):
        bad.calls.append(request)
        raise InvalidRequest("messages must not be empty")
    bad.complete = reject
    rf, fake, _ = fleet_of(bad)
    with pytest.raises(InvalidRequest):
        await rf.complete("chat", "qwen-72b", {})
    assert fake.calls()["k2"] == 0
    # ...and they do not count against the model's breaker.
    assert rf.health()["qwen-72b"]["breaker"]["consecutive_failures"] == 0


async def test_unknown_alias_is_404():
    rf, _, _ = fleet_of()
    with pytest.raises(ModelNotFound):
        await rf.complete("chat", "gpt-9", {})


async def test_breaker_open_model_is_skipped_without_a_call_and_without_using_the_depth():
    rf, fake, clock = fleet_of(FakeModel("r1-distill", mode="error"), FakeModel("k2", mode="error"),
                               resilience={"breaker": {"failure_threshold": 2}})
    for _ in range(2):
        with pytest.raises(ModelUnavailable):
            await rf.complete("reasoning", "r1-distill", {}, fallback_ok=True)
    # r1-distill and k2 both failed twice: both breakers are open now.
    assert rf.health()["r1-distill"]["breaker_state"] == "open"
    assert rf.health()["k2"]["breaker_state"] == "open"
    before = fake.calls()
    response, hops = await rf.complete("reasoning", "r1-distill", {})
    assert response["model"] == "qwen-72b"
    assert [(h.model, h.outcome) for h in hops] == [
        ("r1-distill", "breaker_open"), ("k2", "breaker_open"), ("qwen-72b", "ok")]
    after = fake.calls()
    assert after["r1-distill"] == before["r1-distill"] and after["k2"] == before["k2"]


async def test_breaker_open_with_no_fallback_is_503_with_probe_time():
    rf, fake, clock = fleet_of(FakeModel("coder", mode="error"),
                               resilience={"max_fallback_depth": 0, "breaker": {"failure_threshold": 1}})
    with pytest.raises(UpstreamError):
        await rf.complete("code", "coder", {})
    clock.advance(4)
    with pytest.raises(CircuitOpen) as info:
        await rf.complete("code", "coder", {})
    assert info.value.status == 503 and info.value.retry_after == pytest.approx(6.0)
    assert fake.calls()["coder"] == 1


async def test_breaker_recovers_through_half_open_with_live_traffic():
    flaky = FakeModel("qwen-72b", mode="down")
    rf, fake, clock = fleet_of(flaky, resilience={"max_fallback_depth": 0})
    for _ in range(5):
        with pytest.raises(ModelUnavailable):
            await rf.complete("chat", "qwen-72b", {})
    assert rf.health()["qwen-72b"]["breaker_state"] == "open"
    for _ in range(10):   # rejected fast while open: the dead model gets no calls
        with pytest.raises(CircuitOpen):
            await rf.complete("chat", "qwen-72b", {})
    assert fake.calls()["qwen-72b"] == 5
    flaky.mode = "ok"     # the replica is back
    clock.advance(10)
    for _ in range(3):
        await rf.complete("chat", "qwen-72b", {})
    assert rf.health()["qwen-72b"]["breaker_state"] == "closed"
    assert fake.calls()["qwen-72b"] == 8


async def test_full_queue_answers_429_and_does_not_spill_onto_the_fallback():
    slow = FakeModel("qwen-72b", delay_s=0.2)
    rf, fake, _ = fleet_of(slow, resilience={"admission": {"qwen-72b": {"capacity": 1, "max_queue_size": 1}}})
    first = asyncio.create_task(rf.complete("chat", "qwen-72b", {}))
    second = asyncio.create_task(rf.complete("chat", "qwen-72b", {}))
    await asyncio.sleep(0.01)
    with pytest.raises(RateLimited) as info:
        await rf.complete("chat", "qwen-72b", {})
    assert info.value.status == 429 and info.value.headers()["Retry-After"]
    assert info.value.details["hops"][0]["outcome"] == "rate_limited"
    await asyncio.gather(first, second)
    assert fake.calls() == {"k2": 0, "qwen-72b": 2, "r1-distill": 0, "coder": 0, "minicpm-v": 0}


async def test_timeout_before_answer_falls_back_within_the_deadline():
    rf, fake, _ = fleet_of(FakeModel("coder", mode="hang"),
                           timeouts={"coder": {"first_token_s": 0.1, "total_s": 0.1}})
    response, hops = await rf.complete("code", "coder", {})
    assert response["model"] == "k2"
    assert hops[0].outcome == "timeout" and 95 <= hops[0].elapsed_ms < 500


async def test_unserved_model_in_a_chain_is_skipped():
    config_extra = {"unavailable_models": [{"alias": "big-k3", "role": "coordinator", "reason": "no GPUs"}]}
    rf, fake, _ = fleet_of(FakeModel("qwen-72b", mode="error"),
                           resilience={"fallback_chains": {"chat": ["qwen-72b", "big-k3", "k2"]}},
                           **config_extra)
    response, hops = await rf.complete("chat", "qwen-72b", {})
    assert response["model"] == "k2"
    assert [h.outcome for h in hops] == ["error", "unavailable", "ok"]


async def test_health_reports_every_model():
    rf, _, _ = fleet_of(FakeModel("coder", mode="error"))
    await rf.complete("code", "coder", {})
    health = rf.health()
    assert set(health) == {"k2", "qwen-72b", "r1-distill", "coder", "minicpm-v"}
    assert health["coder"]["success_rate"] == 0.0 and health["k2"]["success_rate"] == 1.0
    assert health["k2"]["latency_p95_ms"] is not None
    assert health["coder"]["breaker"]["consecutive_failures"] == 1
    assert {"queue_length", "in_flight", "estimated_queue_wait_s"} <= set(health["k2"])


async def test_client_for_fusion_never_falls_back():
    rf, fake, _ = fleet_of(FakeModel("coder", mode="error"))
    panel_member = rf.client("coder", task_type="code")
    assert panel_member.alias == "coder"
    with pytest.raises(UpstreamError):
        await panel_member.complete({})
    assert fake.calls()["k2"] == 0
    chunks = [c async for c in rf.client("k2").stream({})]
    assert chunks[-1].data["choices"][0]["finish_reason"] == "stop"


async def test_a_deployment_serve_reports_down_does_not_open_its_breaker():
    # A redeploy without surge leaves a deployment with no running replica for a while; the
    # board fails those calls at once. Counted as failures they opened the breaker, which then
    # kept refusing the model after its new replica was up (found redeploying configs/sim.yaml
    # under load).
    rf, fake, _ = fleet_of(FakeModel("coder", mode="not_running"),
                           resilience={"max_fallback_depth": 0, "breaker": {"failure_threshold": 2}})
    for _ in range(5):
        with pytest.raises(ModelUnavailable) as info:
            await rf.complete("code", "coder", {})
        assert info.value.status == 503 and not isinstance(info.value, CircuitOpen)
    assert rf.health()["coder"]["breaker_state"] == "closed"
    assert rf.health()["coder"]["breaker"]["consecutive_failures"] == 0
    fake.models["coder"].mode = "ok"  # the new replica is up: served at once
    response, _ = await rf.complete("code", "coder", {})
    assert response["model"] == "coder"


async def test_falling_back_past_a_deployment_serve_reports_down_does_not_use_the_depth():
    rf, fake, _ = fleet_of(FakeModel("r1-distill", mode="not_running"), FakeModel("k2", mode="error"))
    response, hops = await rf.complete("reasoning", "r1-distill", {})
    # One hop allowed: k2 (called, failed) uses it; r1-distill was never called.
    assert response["model"] == "qwen-72b"
    assert [(h.model, h.outcome) for h in hops] == [
        ("r1-distill", "unavailable"), ("k2", "error"), ("qwen-72b", "ok")]


async def test_one_requests_failure_inside_a_working_engine_falls_back_but_opens_no_breaker():
    # vLLM's 500 for one request (a JSON Schema its grammar backend cannot compile) fails on
    # every replica of any model it is sent to: counted, five such requests from one client
    # opened k2's breaker for every caller (found probing the embedded default).
    rf, fake, _ = fleet_of(FakeModel("k2", mode="request_failed"),
                           resilience={"breaker": {"failure_threshold": 2}})
    for _ in range(4):
        response, hops = await rf.complete("unknown", "k2", {})
        assert response["model"] == "qwen-72b"                  # another engine may take it
        assert [(h.model, h.outcome) for h in hops] == [("k2", "request_failed"), ("qwen-72b", "ok")]
        assert fallback_header(hops) == "k2:request_failed,qwen-72b:ok"
    health = rf.health()["k2"]
    assert health["breaker_state"] == "closed" and health["breaker"]["consecutive_failures"] == 0
    assert health["failures_total"] == 4                       # still a failed call in its figures
    # A failure of the model itself still counts: two open the breaker.
    fake.models["k2"].mode = "error"
    for _ in range(2):
        await rf.complete("unknown", "k2", {})
    assert rf.health()["k2"]["breaker_state"] == "open"


async def test_a_request_every_engine_fails_is_a_502_that_does_not_ask_for_a_retry():
    # Not "no model could serve it right now, retry shortly" (503): the same body fails again.
    rf, _, _ = fleet_of(FakeModel("k2", mode="request_failed"), FakeModel("qwen-72b", mode="request_failed"))
    with pytest.raises(UpstreamError) as info:
        await rf.complete("unknown", "k2", {})
    err = info.value
    assert err.status == 502 and err.retry_after is None
    assert "Every model tried failed on this request" in err.message and "Please retry" not in err.message
    assert [(h["model"], h["outcome"]) for h in err.details["hops"]] == [("k2", "request_failed"),
                                                                          ("qwen-72b", "request_failed")]
    # One model failing the request and another down is still a 503 worth retrying.
    rf, _, _ = fleet_of(FakeModel("k2", mode="request_failed"), FakeModel("qwen-72b", mode="error"))
    with pytest.raises(ModelUnavailable):
        await rf.complete("unknown", "k2", {})

