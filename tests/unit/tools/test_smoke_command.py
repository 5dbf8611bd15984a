"""``horizon smoke`` over real HTTP against an in-process fake endpoint."""

import asyncio
import json
import re

import pytest
import yaml

from serve_app import cli
from serve_app.config import parse_config
from serve_app.tools.http import ToolUsageError
from serve_app.tools.smoke import SmokeSettings, run_smoke

from tools_fakes import PROFILE_YAML, FakeEndpoint, FakeModel, fleet, serve

FAST = SmokeSettings(request_timeout_s=10)


@pytest.fixture
def profile_file(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE_YAML)
    return path


def cfg():
    return parse_config(yaml.safe_load(PROFILE_YAML))


def smoke(state, **kw):
    with serve(state) as url:
        return {r.alias: r for r in asyncio.run(run_smoke(cfg(), url, settings=kw.pop("settings", FAST), **kw))}


def test_healthy_fleet_passes_every_check_in_bring_up_order(profile_file, capsys):
    state = FakeEndpoint(fleet())
    with serve(state) as url:
        code = cli.main(["smoke", "--config", str(profile_file), "--url", url])
    out = capsys.readouterr().out
    assert code == 0
    assert "smoke: PASS (5/5 models passed)" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "model" not in line]
    # Embedding first, the coordinator (k2) last: SPEC §2 bring-up order.
    assert [r.split("|")[1].strip() for r in rows] == ["bge-m3", "qwen-72b", "r1-distill", "coder", "k2"]
    assert all(r.rstrip(" |").endswith("PASS") for r in rows)
    # The checklist's traffic: 1 answer + 10 stable + 1 over-long + 5 concurrent per chat model.
    assert len(state.requests) == 4 * 17


def test_nothing_listening_is_one_line_and_a_usage_exit(profile_file, capsys):
    # Before: every check of every model failed with the same ConnectError, then "FAIL (0/5)".
    import socket

    with socket.socket() as probe:                  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = cli.main(["smoke", "--config", str(profile_file), "--url", f"http://127.0.0.1:{port}"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert f"nothing answers at http://127.0.0.1:{port} (ConnectError)" in captured.err


def test_one_broken_model_makes_smoke_exit_non_zero(profile_file, capsys):
    state = FakeEndpoint(fleet(coder="random"))
    with serve(state) as url:
        code = cli.main(["smoke", "--config", str(profile_file), "--url", url])
    out = capsys.readouterr().out
    assert code == 1
    coder_row = next(line for line in out.splitlines() if line.startswith("| coder"))
    assert coder_row.split("|")[5].strip() == "FAIL"          # stable x10
    assert coder_row.rstrip(" |").endswith("FAIL")
    assert "coder / stable: 10 different outputs in 10 temperature-0 runs" in out
    assert "smoke: FAIL (4/5 models passed)" in out


def test_stable_runs_are_temperature_zero_and_identical():
    state = FakeEndpoint(fleet())
    reports = smoke(state, aliases=["qwen-72b"])
    assert reports["qwen-72b"].checks["stable"].ok is True
    stable_calls = [b for b in state.requests if b.get("temperature") == 0]
    assert len(stable_calls) == 10


def test_engine_crash_on_long_input_fails_the_context_check():
    reports = smoke(FakeEndpoint(fleet(r1_distill="no_context")), aliases=["r1-distill"])
    check = reports["r1-distill"].checks["context"]
    assert check.ok is False
    assert "expected 400 context_length_exceeded, got HTTP 500" in check.detail
    # Past the largest context of the profile (k2's 1024) so no fallback can take it.
    assert "~2048 tokens" in check.detail


def test_failures_under_concurrency_fail_the_concurrent_check():
    reports = smoke(FakeEndpoint(fleet(coder="fragile")), aliases=["coder"])
    assert reports["coder"].checks["concurrent"].ok is False
    assert reports["coder"].checks["stable"].ok is True  # one at a time it works


def test_a_model_that_does_not_answer_skips_the_rest():
    report = smoke(FakeEndpoint(fleet(k2="down")), aliases=["k2"])["k2"]
    assert report.checks["answers"].ok is False
    assert "HTTP 503" in report.checks["answers"].detail
    assert {report.checks[n].ok for n in ("stable", "context", "concurrent")} == {None}
    assert report.ok is False


def test_an_answer_from_a_fallback_model_is_not_the_model_answering():
    report = smoke(FakeEndpoint(fleet(coder="fallback")), aliases=["coder"])["coder"]
    assert report.checks["answers"].ok is False
    assert "answered by k2" in report.checks["answers"].detail


def test_slow_first_inference_fails_the_limit():
    models = fleet()
    models["qwen-72b"] = FakeModel(max_model_len=512, delay_s=0.3)
    settings = SmokeSettings(request_timeout_s=10, first_inference_limit_s=0.1, stable_runs=2)
    report = smoke(FakeEndpoint(models), aliases=["qwen-72b"], settings=settings)["qwen-72b"]
    assert report.checks["answers"].ok is False
    assert re.fullmatch(r"first inference took \d+\.\d s \(limit 0\.1 s\)", report.checks["answers"].detail)


def test_embedding_model_is_checked_through_embeddings():
    endpoint = FakeEndpoint(fleet())
    report = smoke(endpoint, aliases=["bge-m3"])["bge-m3"]
    assert report.checks["answers"].ok is True
    assert report.checks["answers"].detail == "2-d vector"
    assert report.checks["context"].ok is True
    # SPEC §2's checklist holds for every model: 10 runs the same, 5 at once.
    assert report.checks["stable"].ok is True and report.checks["stable"].detail.startswith("10 the same")
    assert report.checks["concurrent"].ok is True and report.checks["concurrent"].detail.startswith("5/5 ok")
    assert endpoint.embedding_calls == 1 + 10 + 5   # answered: first, stable, concurrent (not the long one)
    assert report.ok


def test_an_embedder_whose_vector_wanders_fails_the_stable_check():
    report = smoke(FakeEndpoint(fleet(), embedding_drift=0.01), aliases=["bge-m3"])["bge-m3"]
    assert report.checks["stable"].ok is False
    assert report.checks["stable"].detail == "the same text's vector moved by up to 0.1 over 10 runs"
    assert not report.ok


def test_an_embedder_that_cuts_long_input_silently_fails_the_context_check():
    report = smoke(FakeEndpoint(fleet(), embedding_refuses_long_input=False), aliases=["bge-m3"])["bge-m3"]
    assert report.checks["answers"].ok is True and report.checks["context"].ok is False
    assert "expected 400 context_length_exceeded, got HTTP 200" in report.checks["context"].detail
    assert not report.ok


def test_without_config_smoke_checks_what_horizon_serve_runs(profile_file, tmp_path, monkeypatch, capsys):
    from serve_app.tools import local_cluster as lc

    monkeypatch.setenv(lc.STATE_DIR_ENV, str(tmp_path / "state"))
    assert cli.main(["smoke", "--model", "coder"]) == 2
    assert "--config is required when no `horizon serve` is running" in capsys.readouterr().err
    with serve(FakeEndpoint(fleet())) as url:
        host, port = url.rsplit("//", 1)[1].split(":")
        lc.ServeState(pid=1, config=str(profile_file), host=host, port=int(port), route_prefix="/",
                      app_name="horizon").save()
        assert cli.main(["smoke", "--model", "coder"]) == 0
    assert "smoke: PASS (1/1 models passed)" in capsys.readouterr().out


def test_json_report_file(profile_file, tmp_path, capsys):
    out_file = tmp_path / "smoke.json"
    with serve(FakeEndpoint(fleet(k2="down"))) as url:
        code = cli.main(["smoke", "--config", str(profile_file), "--url", url, "--model", "k2",
                         "--model", "coder", "--json", str(out_file)])
    assert code == 1
    data = json.loads(out_file.read_text())
    assert [(m["alias"], m["ok"]) for m in data] == [("coder", True), ("k2", False)]


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000", "http://example.com", "ftp://127.0.0.1"])
def test_non_loopback_targets_are_refused(profile_file, url, capsys):
    assert cli.main(["smoke", "--config", str(profile_file), "--url", url]) == 2
    assert "horizon smoke:" in capsys.readouterr().err


def test_loopback_forms_are_accepted():
    from serve_app.tools.http import loopback_base_url
    assert loopback_base_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert loopback_base_url("http://localhost:9") == "http://localhost:9"
    assert loopback_base_url("http://[::1]:8000") == "http://[::1]:8000"
    with pytest.raises(ToolUsageError):
        loopback_base_url("http://192.168.0.1")


def test_unknown_model_and_bad_config_are_usage_errors(profile_file, tmp_path, capsys):
    assert cli.main(["smoke", "--config", str(profile_file), "--model", "gpt-4"]) == 2
    assert "unknown model" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: x\nmodels: []\n")
    assert cli.main(["smoke", "--config", str(bad)]) == 2
