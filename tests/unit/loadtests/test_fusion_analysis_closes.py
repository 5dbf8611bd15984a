"""loadtests/fusion_analysis_closes.py reads a Fusion trace: closed, cut, tokens, and its sampling."""

import httpx
import pytest

from loadtests import fusion_analysis_closes as bench

KEYS = {k: [] for k in bench.ANALYSIS_KEYS}


def _answer(analysis: dict, tokens: int):
    trace = {"analysis": analysis, "judge_calls": [
        {"stage": "analysis", "latency_ms": 2500.0, "usage": {"completion_tokens": tokens},
         "sampling": {"temperature": 0, "max_tokens": 384}},
        {"stage": "synthesis", "latency_ms": 10.0, "usage": {"completion_tokens": 8}}]}
    return httpx.Response(200, json={"fusion": trace},
                          request=httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions"))


@pytest.mark.parametrize("analysis, closed, cut", [
    (KEYS, True, False),
    ({**KEYS, "raw": "{...", "cut": True}, False, True),                # repaired, but cut
    ({"consensus": [], "missing_keys": ["contradictions"]}, False, False),  # closed early, keys missing
    ({"raw": "prose", "parse_failed": True}, False, False),
])
def test_a_trace_reads_as_closed_only_with_all_five_keys_and_no_cut(monkeypatch, analysis, closed, cut):
    sent = {}

    def post(url, timeout, json):
        sent.update(json)
        return _answer(analysis, 384 if cut else 200)

    monkeypatch.setattr(bench.httpx, "post", post)
    row = bench.fusion_request("http://127.0.0.1:8000", "q?", 0.0, 0.0, 32)
    assert (row["closed"], row["cut"], row["analysis_s"]) == (closed, cut, 2.5)
    assert sent["plugins"][0]["analysis_frequency_penalty"] == 0.0 and sent["temperature"] == 0.0


def test_the_judge_default_variant_sends_no_penalty_of_its_own(monkeypatch):
    sent = {}
    monkeypatch.setattr(bench.httpx, "post", lambda url, timeout, json: sent.update(json) or _answer(KEYS, 200))
    bench.fusion_request("http://127.0.0.1:8000", "q?", 0.3, None, 32)
    assert "analysis_frequency_penalty" not in sent["plugins"][0]


def test_a_non_loopback_url_is_refused(monkeypatch):
    monkeypatch.setattr("sys.argv", ["fusion_analysis_closes.py", "--url", "http://10.0.0.5:8000"])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2
