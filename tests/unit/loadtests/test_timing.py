import json

import pytest

from loadtests.lib.timing import RequestRecord, StreamError, StreamTimer, sse_events


def chunk(content=None, usage=None, role=False):
    delta = {"role": "assistant", "content": ""} if role else ({"content": content} if content else {})
    out = {"choices": [{"index": 0, "delta": delta}]}
    if usage is not None:
        out["usage"] = usage
    return out


def test_stream_timer_measures_ttft_itl_tpot():
    t = StreamTimer(sent_at=10.0)
    t.on_chunk(chunk(role=True), 10.5)          # first chunk: TTFT
    for i, at in enumerate((10.5, 10.6, 10.75, 10.85)):
        t.on_chunk(chunk(f"tok{i} "), at)
    t.on_chunk(chunk(usage={"completion_tokens": 4}), 10.9)
    assert t.ttft_s == pytest.approx(0.5)
    assert t.itl == pytest.approx([0.1, 0.15, 0.1])
    assert t.output_tokens == 4
    # (E2EL - TTFT) / (tokens - 1) = (10.9 - 10.5) / 3
    assert t.tpot_s(10.9) == pytest.approx(0.4 / 3)


def test_tokens_counted_from_chunks_without_usage_and_no_tpot_for_one_token():
    t = StreamTimer(sent_at=0.0)
    t.on_chunk(chunk("only"), 0.2)
    assert t.output_tokens == 1 and t.tpot_s(0.3) is None and t.itl == []
    assert StreamTimer(0.0).ttft_s is None


def test_usage_only_chunk_does_not_count_as_first_token():
    t = StreamTimer(sent_at=0.0)
    t.on_chunk({"choices": [], "usage": {"completion_tokens": 3}}, 0.1)
    assert t.ttft_s is None and t.output_tokens == 3


def test_sse_events_parse_until_done_and_surface_errors():
    lines = [b": keep-alive", b"", b'data: {"a": 1}', "data: {\"b\": 2}", b"data: [DONE]", b'data: {"c": 3}']
    assert list(sse_events(lines)) == [{"a": 1}, {"b": 2}]
    with pytest.raises(StreamError, match="upstream timed out"):
        list(sse_events([b'data: {"error": {"message": "upstream timed out"}}']))


def test_record_round_trip_includes_e2el():
    r = RequestRecord(start=1.0, end=3.5, category="chat", stream=True, fusion=False, requested_model="auto",
                      status=200, ok=True, decision="general_chat", model="qwen-72b", ttft_s=0.2, itl_s=[0.01])
    line = r.to_json()
    assert json.loads(line)["e2el_s"] == 2.5
    assert RequestRecord.from_json(line) == r
