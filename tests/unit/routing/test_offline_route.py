"""``horizon route`` on a small labelled file (fake embedder in-process; no Ray, no vLLM)."""

import argparse
import io
import json

import pytest
import yaml

from serve_app import cli
from serve_app.routing import offline

from routing_fakes import VOCABULARY, BagOfWordsEmbedder, chat, profile


@pytest.fixture
def files(tmp_path, template_dir):
    config = tmp_path / "profile.yaml"
    config.write_text(yaml.safe_dump(profile(template_dir)))
    rows = [
        {**chat("fix the bug in my python function code"), "label": "code"},
        {**chat("prove this integral equation"), "label": "reasoning"},
        {**chat("describe it", image=True), "label": "vision"},
        {**chat("hello friend how is the weather"), "label": "chat"},
        {**chat("zebra giraffe elephant walking slowly"), "label": "chat"},  # escalates -> unknown
        {"messages": "not a list", "label": "chat"},  # a bad line is reported, not fatal
    ]
    data = tmp_path / "in.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return config, data


def args(config, data, **extra):
    ns = argparse.Namespace(config=str(config), input=str(data), labels=True, no_llm=True, llm_url=None, output=None)
    for k, v in extra.items():
        setattr(ns, k, v)
    return ns


def test_route_file_writes_one_json_line_per_input_and_a_report(files):
    config, data = files
    out, err = io.StringIO(), io.StringIO()
    rc = offline.run(args(config, data), embedder_factory=lambda cfg: BagOfWordsEmbedder(VOCABULARY), out=out, err=err)
    assert rc == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 6
    for key in ("task_type", "decision", "model", "confidence", "signals", "latency_ms"):
        assert key in lines[0]
    assert [line["task_type"] for line in lines] == ["code", "reasoning", "vision", "chat", "unknown", "error"]
    assert lines[4]["escalated"] is True and lines[4]["decision"] == "unclassified"
    report = err.getvalue()
    assert "--no-llm: escalations reported as 'unknown'" in report
    assert "accuracy: 66.7% (4/6)" in report
    assert "k2 escalations: 16.7% (1/6" in report
    assert "confusion matrix" in report and "per-intent accuracy" in report


def test_evaluate_counts_per_intent_and_confusion():
    from serve_app.config.routing import Decision
    from serve_app.routing.router import RoutingResult

    def item(label, predicted, escalated=False):
        d = Decision.model_validate({"name": "d", "modelRefs": [{"model": "m"}]})
        r = RoutingResult(d, "m", predicted, 1.0, [], 1.0, None, escalated)
        return offline.RoutedItem(0, r, 1.0, label)

    report = offline.evaluate([item("code", "code"), item("code", "chat"), item("chat", "chat"),
                               item("chat", "unknown", escalated=True)])
    assert report.accuracy == 0.5 and report.escalation_rate == 0.25
    assert report.per_intent() == {"chat": (1, 2), "code": (1, 2)}
    assert report.confusion["code"] == {"code": 1, "chat": 1}


def test_route_is_registered_in_the_cli():
    assert ("route", "serve_app.routing.offline") in [(name, module) for name, module, _ in cli._COMMANDS]


def test_bad_config_exits_non_zero(tmp_path, files):
    _, data = files
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"profile": "x"}))
    err = io.StringIO()
    assert offline.run(args(bad, data), embedder_factory=lambda cfg: None, out=io.StringIO(), err=err) == 1
    assert "routing" in err.getvalue()


def test_simulated_k2_cannot_be_loaded_in_process(files):
    config, data = files
    err = io.StringIO()
    rc = offline.run(args(config, data, no_llm=False), embedder_factory=lambda cfg: BagOfWordsEmbedder(VOCABULARY),
                     out=io.StringIO(), err=err)
    assert rc == 1 and "--no-llm" in err.getvalue()


def test_an_output_it_cannot_write_is_one_line(tmp_path, files):
    config, data = files
    err = io.StringIO()
    rc = offline.run(args(config, data, output=str(tmp_path)), embedder_factory=lambda cfg: BagOfWordsEmbedder(VOCABULARY),
                     err=err)
    assert rc == 1 and err.getvalue().startswith("horizon route: ") and "Is a directory" in err.getvalue()


@pytest.mark.parametrize("extra, says", [
    (["--step", "0"], "argument --step: must be a number above 0"),
    (["--min", "0.9", "--max", "0.1"], "--min 0.9 is above --max 0.1"),
    (["--classifier-accuracy", "2"], "argument --classifier-accuracy: must be from 0 to 1"),
    (["--max-escalation", "nan"], "argument --max-escalation: must be from 0 to 1"),
])
def test_calibration_refuses_a_sweep_it_cannot_run(extra, says, capsys):
    from serve_app.routing import calibration

    with pytest.raises(SystemExit) as exit_:
        calibration.main(["--config", "configs/sim.yaml", *extra])
    assert exit_.value.code == 2 and says in capsys.readouterr().err
