"""``horizon eval`` over real HTTP against an in-process fake endpoint."""

import asyncio
import json
from pathlib import Path

import pytest

from serve_app import cli
from serve_app.tools.evaluate import EvalSettings, load_items, run_eval, summarize
from serve_app.tools.http import ToolUsageError

from tools_fakes import FakeEndpoint, fleet, serve

SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}
STRICT_FORMAT = {"type": "json_schema", "json_schema": {"name": "b", "schema": {
    "type": "object", "required": ["score"]}}}


def item(text, label, **kw):
    return {"messages": [{"role": "user", "content": text}], "label": label, **kw}


# Fake routing: "def"/"function" -> code, "prove"/"solve" -> reasoning, "tl;dr" -> summary, else chat.
ITEMS = [
    item("hello there, how are you", "chat"),                                    # ok
    item("write a function to add numbers", "code"),                             # ok
    item("summarize this long memo please", "summary"),                          # routed as chat: wrong
    item("solve x + 1 = 2", "reasoning", response_format=SCHEMA_FORMAT),         # valid JSON + schema
    item("def f(): pass -- explain BADJSON", "code", expect_json=True),          # invalid JSON: fail
    item("tl;dr GATEWAY", "summary"),                                            # 504: timeout, fail
    item("tl;dr of the news FALLBACK", "summary"),                               # ok, fallback
    item("prove it SLOW", "reasoning"),                                          # client timeout
    item("prove this JSON", "reasoning", response_format=STRICT_FORMAT),         # JSON breaks schema
]


def write_items(path, items):
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    return path


def evaluate(items, tmp_path, **settings):
    path = write_items(tmp_path / "items.jsonl", items)
    state = FakeEndpoint(fleet())
    with serve(state) as url:
        outcomes = asyncio.run(run_eval(load_items(path), url,
                                        settings=EvalSettings(**{"request_timeout_s": 1.0, **settings})))
    return outcomes, state


def test_the_four_metrics_overall_and_per_task_type(tmp_path):
    outcomes, _ = evaluate(ITEMS, tmp_path)
    by_index = {o.index: o for o in outcomes}
    assert [o.success for o in outcomes] == [True, True, True, True, False, False, True, False, False]
    assert by_index[4].problem.startswith("answer is not valid JSON")
    assert by_index[5].status == 504 and by_index[5].timed_out
    assert by_index[7].status is None and by_index[7].timed_out
    assert by_index[8].problem == "answer breaks the schema: 'score' is a required property"
    assert by_index[6].fallback == "qwen-72b:timeout,k2:ok"

    rows = {m.group: m for m in summarize(outcomes)}
    overall = rows["overall"]
    assert overall.requests == 9
    # Wrong routes: the "summarize" item (chat); no header at all on the client timeout.
    assert overall.routing_accuracy == round(7 / 9, 4)
    assert overall.success_rate == round(5 / 9, 4)
    assert overall.timeout_rate == round(2 / 9, 4)
    assert overall.fallback_rate == round(1 / 9, 4)
    summary = rows["summary"]
    assert (summary.requests, summary.routing_accuracy, summary.success_rate, summary.timeout_rate,
            summary.fallback_rate) == (3, round(2 / 3, 4), round(2 / 3, 4), round(1 / 3, 4), round(1 / 3, 4))
    reasoning = rows["reasoning"]
    assert (reasoning.requests, reasoning.success_rate, reasoning.timeout_rate) == (3, round(1 / 3, 4), round(1 / 3, 4))
    assert list(rows) == ["overall", "chat", "code", "summary", "reasoning"]


def test_requests_carry_model_format_and_token_limit(tmp_path):
    items = [item("hi", "chat", max_tokens=7), item("solve", "reasoning", response_format=SCHEMA_FORMAT,
                                                    model="r1-distill")]
    _, state = evaluate(items, tmp_path, max_tokens=64)
    sent = sorted(state.requests, key=lambda b: b["model"])
    assert sent[0]["model"] == "r1-distill" and sent[0]["response_format"] == SCHEMA_FORMAT
    assert sent[0]["max_tokens"] == 64
    assert sent[1]["model"] == "vllm-sr/auto" and sent[1]["max_tokens"] == 7


def test_concurrency_is_bounded(tmp_path):
    items = [item(f"PAUSE number {i}", "chat") for i in range(8)]
    _, state = evaluate(items, tmp_path, concurrency=2)
    assert state.max_in_flight == 2
    _, state = evaluate(items, tmp_path, concurrency=8)
    assert state.max_in_flight > 2


def test_cli_writes_markdown_and_json_reports(tmp_path, capsys):
    path = write_items(tmp_path / "items.jsonl", ITEMS[:4])
    out_dir = tmp_path / "report"
    with serve(FakeEndpoint(fleet())) as url:
        code = cli.main(["eval", "--url", url, "--input", str(path), "--out", str(out_dir),
                         "--concurrency", "2"])
    assert code == 0
    printed = capsys.readouterr().out
    md = (out_dir / "eval.md").read_text()
    assert md.splitlines()[0].startswith("| task type | requests | routing accuracy | e2e success")
    assert "| overall   | 4        | 75.0 %" in md
    assert md.strip() in printed
    data = json.loads((out_dir / "eval.json").read_text())
    assert data["summary"][0]["group"] == "overall" and data["summary"][0]["success_rate"] == 1.0
    assert [i["routed_task_type"] for i in data["items"]] == ["chat", "code", "chat", "reasoning"]


def test_cli_thresholds_fail_the_run(tmp_path, capsys):
    path = write_items(tmp_path / "items.jsonl", ITEMS[:5])
    with serve(FakeEndpoint(fleet())) as url:
        assert cli.main(["eval", "--url", url, "--input", str(path), "--out", str(tmp_path / "r"),
                         "--min-success", "0.9"]) == 1
        assert "success rate 0.800 < 0.9" in capsys.readouterr().err
        assert cli.main(["eval", "--url", url, "--input", str(path), "--out", str(tmp_path / "r"),
                         "--min-success", "0.8", "--min-routing-accuracy", "0.8"]) == 0


def test_endpoint_down_is_one_line_and_no_report(tmp_path, capsys):
    path = write_items(tmp_path / "items.jsonl", ITEMS[:2])
    with serve(FakeEndpoint(fleet())) as url:
        pass  # stopped: nothing listens on this port any more
    assert cli.main(["eval", "--url", url, "--input", str(path), "--out", str(tmp_path / "r")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"nothing answers at {url} (ConnectError)" in captured.err
    assert not (tmp_path / "r").exists()  # no report of connection errors


@pytest.mark.parametrize("line, message", [
    ('{"messages": [{"role": "user", "content": "x"}], "label": "chitchat"}', ":1: label"),
    ('{"messages": [], "label": "chat"}', ":1: messages"),
    ('{"messages": [{"role": "user", "content": "x"}], "label": "chat", "expect_jsn": true}', ":1: expect_jsn"),
    ('not json', ":1: not JSON"),
])
def test_bad_input_lines_are_usage_errors_naming_the_line(tmp_path, capsys, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    assert cli.main(["eval", "--url", "http://127.0.0.1:9", "--input", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_non_loopback_target_is_refused(tmp_path):
    path = write_items(tmp_path / "items.jsonl", ITEMS[:1])
    with pytest.raises(ToolUsageError, match="loopback"):
        asyncio.run(run_eval(load_items(path), "http://203.0.113.7:8000"))


def test_the_shipped_e2e_set_is_valid_and_covers_the_task_types():
    items = load_items(Path(__file__).resolve().parents[3] / "configs/eval/e2e_eval.jsonl")
    labels = {i.label for i in items}
    assert {"chat", "reasoning", "code", "summary", "vision", "safety"} <= labels
    assert sum(i.demands_json for i in items) >= 3
    assert any(i.schema for i in items)
