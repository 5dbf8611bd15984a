import math

import numpy as np
import pytest

from loadtests.lib.plots import ReplicaSample, percentiles_over_time, plot_latency, plot_replicas
from loadtests.lib.summary import SLO, markdown_report, percentile, summarize
from loadtests.lib.timing import RequestRecord

T0 = 1_700_000_000.0


def rec(start, e2el, *, stream=True, ttft=0.1, tpot=0.01, ok=True, decision="general_chat", model="qwen-72b",
        tokens=10, status=200):
    return RequestRecord(start=T0 + start, end=T0 + start + e2el, category="chat", stream=stream, fusion=False,
                         requested_model="vllm-sr/auto", status=status, ok=ok, decision=decision, model=model,
                         ttft_s=ttft if stream else None, tpot_s=tpot if stream else None,
                         itl_s=[tpot] * (tokens - 1) if stream else [], output_tokens=tokens,
                         error=None if ok else "overloaded")


def test_percentile_matches_numpy():
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3]
    for q in (0, 50, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert math.isnan(percentile([], 50))


def test_goodput_counts_requests_meeting_every_slo():
    records = [
        rec(0, 1.0),                              # good
        rec(0, 1.0, ttft=3.0),                    # TTFT 3000 ms > 2000
        rec(0, 1.0, tpot=0.2),                    # TPOT 200 ms > 100
        rec(0, 25.0),                             # E2EL > 20 s
        rec(0, 1.0, stream=False),                # non-stream: judged on E2EL only -> good
        rec(0, 1.0, ok=False, status=503),        # failed: never good
    ]
    s = summarize(records, SLO())
    assert (s.requests, s.completed, s.failed, s.good) == (6, 5, 1, 2)
    assert s.duration_s == pytest.approx(25.0)
    assert s.goodput == pytest.approx(2 / 25.0)
    assert s.metrics["e2el"].count == 5 and s.metrics["ttft"].count == 4
    assert s.metrics["ttft"].mean == pytest.approx((100 + 3000 + 100 + 100) / 4)


def test_slo_parse_uses_vllm_syntax_and_unnamed_slos_are_off():
    slo = SLO.parse(["ttft:500", "e2el:8000"])
    assert (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms) == (500, None, 8000)
    assert slo.met_by(rec(0, 1.0, tpot=5.0))  # TPOT not judged
    with pytest.raises(ValueError):
        SLO.parse(["latency:5"])


def test_markdown_uses_vllm_names_and_has_per_decision_and_model_rows():
    records = [rec(0, 1.0), rec(1, 2.0, decision="code", model="coder"), rec(2, 1.0, ok=False, status=429)]
    md = markdown_report(records, SLO(ttft_ms=1000, tpot_ms=None, e2el_ms=None), title="T", notes=["n1"],
                         images=["/x/latency.png"])
    for name in ("Mean TTFT (ms)", "P99 TPOT (ms)", "Median ITL (ms)", "P95 E2EL (ms)",
                 "Request goodput (req/s)", "Output token throughput (tok/s)", "TTFT ≤ 1000 ms"):
        assert name in md
    assert "| code | 1 | 0 | 2000.0 |" in md and "| coder | 1 | 0 | 2000.0 |" in md
    assert "| general_chat | 2 | 1 |" in md
    assert "429 overloaded" in md and "![latency](latency.png)" in md


def test_percentiles_over_time_bucket_by_finish_time():
    records = [rec(0, 0.5), rec(0.2, 0.6), rec(5.5, 1.0), rec(6, 3.0)]
    pts = percentiles_over_time(records, "e2el", 5.0, T0)
    assert [(p.t, p.count) for p in pts] == [(5.0, 2), (10.0, 2)]
    assert pts[1].p50 == pytest.approx(2000.0) and pts[0].p95 == pytest.approx(595.0)


def test_plots_are_written_as_png(tmp_path):
    records = [rec(i * 0.5, 0.5 + (i % 5) * 0.1) for i in range(60)]
    replicas = [ReplicaSample(T0 + t, "qwen-72b", 1 if t < 15 else 2) for t in range(30)]
    replicas += [ReplicaSample(T0 + t, "coder", 1) for t in range(30)]
    for path in (plot_latency(records, tmp_path / "lat.png", t0=T0, marks=[(10, "step")]),
                 plot_replicas(replicas, tmp_path / "rep.png", t0=T0, marks=[(10, "step")])):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
