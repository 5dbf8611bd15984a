"""Streams through the chain: fallback before the first token, an error chunk after it."""

from __future__ import annotations

import pytest

from serve_app.errors import ModelUnavailable, UpstreamTimeout
from serve_app.resilience import ResilientFleet, fallback_header

from resilience_fakes import FakeClock, FakeModel, make_config, make_fleet

pytestmark = pytest.mark.asyncio


def fleet_of(*models, resilience=None, **kw):
    fake = make_fleet(*models)
    return ResilientFleet(fake, make_config(resilience=resilience, **kw), clock=FakeClock()), fake


def texts(chunks):
    return "".join((c.data.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for c in chunks)


async def test_stream_served_by_primary():
    rf, fake = fleet_of()
    run = rf.stream("chat", "qwen-72b", {"stream": True})
    chunks = [c async for c in run]
    assert texts(chunks) == "t0 t1 t2 "
    assert [(h.model, h.outcome) for h in run.hops] == [("qwen-72b", "ok")]
    assert run.model == "qwen-72b"
    assert rf.health()["qwen-72b"]["success_rate"] == 1.0
    assert rf.admission("qwen-72b").in_flight == 0


async def test_first_token_timeout_falls_back_silently_before_anything_was_sent():
    rf, fake = fleet_of(FakeModel("r1-distill", mode="hang"),
                        timeouts={"r1-distill": {"first_token_s": 0.1, "total_s": 5}})
    run = rf.stream("reasoning", "r1-distill", {})
    first = await run.__anext__()
    # The hung model's role chunk was held back: every chunk comes from k2.
    assert first.data["model"] == "k2"
    rest = [c async for c in run]
    assert all(c.data["model"] == "k2" for c in rest)
    assert fallback_header(run.hops) == "r1-distill:timeout,k2:ok"
    assert fake.calls()["qwen-72b"] == 0


async def test_mid_stream_failure_ends_with_an_error_chunk_and_no_switch():
    rf, fake = fleet_of(FakeModel("coder", tokens=5, fail_after_chunks=2))
    run = rf.stream("code", "coder", {})
    chunks = [c async for c in run]
    assert texts(chunks) == "t0 t1 "
    assert chunks[-1].data == {"error": {"message": "coder broke mid-stream", "type": "upstream_error",
                                    "param": None, "code": "upstream_error"}}
    assert sum(c.is_error for c in chunks) == 1
    assert fake.calls()["k2"] == 0          # no silent switch to the fallback
    health = rf.health()["coder"]
    assert health["success_rate"] == 0.0 and health["breaker"]["consecutive_failures"] == 1
    assert rf.admission("coder").in_flight == 0


async def test_total_timeout_mid_stream_is_an_error_chunk():
    rf, fake = fleet_of(FakeModel("k2", tokens=100, token_delay_s=0.03),
                        timeouts={"k2": {"first_token_s": 0.1, "total_s": 0.15}})
    run = rf.stream("unknown", "k2", {})
    chunks = [c async for c in run]
    assert chunks[-1].data["error"]["type"] == "timeout_error"
    assert fake.calls()["qwen-72b"] == 0


async def test_no_model_answers_raises_before_any_chunk():
    rf, fake = fleet_of(FakeModel("qwen-72b", mode="down"), FakeModel("k2", mode="down"))
    run = rf.stream("chat", "qwen-72b", {})
    with pytest.raises(ModelUnavailable) as info:
        await run.__anext__()
    assert [h["outcome"] for h in info.value.details["hops"]] == ["unavailable", "unavailable"]


async def test_vision_stream_does_not_fall_back():
    rf, fake = fleet_of(FakeModel("minicpm-v", mode="hang"),
                        timeouts={"minicpm-v": {"first_token_s": 0.05, "total_s": 1}})
    with pytest.raises(UpstreamTimeout) as info:
        await rf.stream("vision", "minicpm-v", {}).__anext__()
    assert "clearer image" in info.value.message
    assert sum(fake.calls().values()) == 1


async def test_client_disconnect_frees_the_slot_and_is_not_a_failure():
    rf, fake = fleet_of(FakeModel("qwen-72b", tokens=50, token_delay_s=0.01))
    run = rf.stream("chat", "qwen-72b", {})
    await run.__anext__()
    await run.__anext__()
    assert rf.admission("qwen-72b").in_flight == 1
    await run.aclose()
    assert rf.admission("qwen-72b").in_flight == 0
    assert fake.models["qwen-72b"].closed_streams == 1
    health = rf.health()["qwen-72b"]
    assert health["breaker"]["consecutive_failures"] == 0 and health["requests_total"] == 0
