import socket

import pytest

from fake_openai_server import FakeOpenAIServer

from loadtests import runner
from loadtests.lib.plots import ReplicaSample
from loadtests.lib.replicas import ReplicaPoller, read_replicas_csv, replicas_from_health, write_replicas_csv
from loadtests.lib.scenarios import Scenario, build_scenario
from loadtests.lib.targets import TargetRefused


def test_step_scenario_stages_and_end():
    s = build_scenario("step", 60, 20, base_users=2, step_at_s=15)
    assert s.at(0).users == 2 and s.at(14.9).users == 2 and s.at(15).users == 20 and s.at(59.9).users == 20
    assert s.at(60) is None and s.duration_s == 60
    assert Scenario.from_json(s.to_json()) == s
    assert runner.step_marks(s) == [(15, "2→20 users")]
    assert build_scenario("step", 30, 5).stages[0].until_s == 10
    assert build_scenario("constant", 10, 3).at(5).users == 3
    with pytest.raises(ValueError):
        build_scenario("step", 30, 5, step_at_s=40)
    with pytest.raises(ValueError):
        build_scenario("spike", 30, 5)


def test_replicas_from_health_body():
    body = {"status": "ready", "models": {"qwen-72b": {"replicas": 2, "status": "HEALTHY"},
                                          "k3": {"status": "NOT_SERVED"}}}
    assert replicas_from_health(body, 5.0) == [ReplicaSample(5.0, "qwen-72b", 2)]


def test_poller_collects_until_stopped_and_csv_round_trip(tmp_path):
    calls = []

    def fetch(url, timeout):
        calls.append(url)
        if len(calls) == 2:
            raise OSError("connection reset")
        return {"models": {"coder": {"replicas": len(calls)}}}

    import time

    with ReplicaPoller("http://127.0.0.1:1", interval_s=0.01, fetch=fetch) as poller:
        time.sleep(0.2)
    n = len(calls)
    time.sleep(0.05)
    assert len(calls) == n and poller.errors == 1 and len(poller.samples) == n - 1
    write_replicas_csv(poller.samples, tmp_path / "r.csv")
    back = read_replicas_csv(tmp_path / "r.csv")
    assert [(s.model, s.replicas) for s in back] == [(s.model, s.replicas) for s in poller.samples]
    with pytest.raises(TargetRefused):
        ReplicaPoller("http://192.168.1.4:8000")


def test_url_from_profile_and_locust_invocation(tmp_path):
    assert runner.url_from_profile("configs/sim.yaml") == "http://127.0.0.1:8000"
    prof = tmp_path / "p.yaml"
    prof.write_text("http_options: {host: 0.0.0.0, port: 9001}\napplications: [{route_prefix: /sim}]\n")
    assert runner.url_from_profile(prof) == "http://127.0.0.1:9001/sim"

    args = runner.parse_args(["--url", "http://127.0.0.1:8000", "--scenario", "step", "--duration", "30",
                              "--users", "12", "--fusion-share", "0.1", "--models", "qwen-72b,coder",
                              "--slo", "ttft:500", "--out", str(tmp_path / "o")])
    s = runner.settings_from_args(args, args.url)
    cmd = runner.locust_command(s)
    assert "--headless" in cmd and cmd[cmd.index("--host") + 1] == "http://127.0.0.1:8000"
    env = runner.locust_env(s, tmp_path / "records.jsonl")
    assert env["LOADTEST_FUSION_SHARE"] == "0.1" and env["LOADTEST_MODELS"] == "qwen-72b,coder"
    assert Scenario.from_json(env["LOADTEST_STAGES"]).stages[-1].users == 12
    assert s.slo.ttft_ms == 500 and s.slo.e2el_ms is None


@pytest.mark.parametrize("text, key", [
    ("http_options: {port: 70000}\napplications: [{route_prefix: /}]\n", "http_options.port"),
    ("http_options: {port: 8000}\napplications: [{route_prefix: sim}]\n", "applications[0].route_prefix"),
    ("http_options: x\napplications: [{route_prefix: /}]\n", "http_options"),
    ("applications: x\n", "applications"),
])
def test_url_from_profile_names_an_address_serve_could_not_listen_on(tmp_path, text, key):
    from serve_app.config.loader import ConfigError

    prof = tmp_path / "p.yaml"
    prof.write_text(text)
    with pytest.raises(ConfigError) as err:
        runner.url_from_profile(prof)
    assert err.value.paths == [key]


def test_runner_refuses_remote_targets(tmp_path):
    args = runner.parse_args(["--url", "http://example.com", "--out", str(tmp_path)])
    with pytest.raises(TargetRefused):
        runner.settings_from_args(args, args.url)


def test_start_hook_refuses_an_invalid_profile(tmp_path):
    # start_profile validates the profile before it starts anything.
    bad = tmp_path / "bad.yaml"
    bad.write_text("applications:\n  - name: x\n    import_path: serve_app.app:build_app\n"
                   "    args: {profile: x, models: [], routing: {decisions: [], default_decision: d}}\n")
    from serve_app.config.loader import ConfigError

    with pytest.raises(ConfigError):
        runner.start_profile(str(bad))


@pytest.mark.parametrize("extra, says", [
    (["--duration", "0"], "argument --duration: must be a number above 0"),
    (["--users", "0"], "argument --users: must be at least 1"),
    (["--max-requests", "0"], "argument --max-requests: must be at least 1"),
    (["--stream-share", "1.5"], "argument --stream-share: must be from 0 to 1"),
    (["--window", "0"], "argument --window: must be a number above 0"),
    (["--step-at", "5"], "--step-at only applies to --scenario step"),
    (["--scenario", "step", "--duration", "10", "--step-at", "10"], "step_at_s must lie inside the duration"),
    (["--mix", "chat"], "mix entry 'chat': expected CATEGORY=SHARE"),
    (["--mix", "chat=lots"], "mix entry 'chat=lots': expected CATEGORY=SHARE"),
    (["--slo", "ttft:-1"], "SLO 'ttft:-1': expected METRIC:MS with MS a number above 0"),
    (["--slo", "e2el:soon"], "SLO 'e2el:soon': expected METRIC:MS"),
    (["--api-key-env", "HORIZON_TEST_NO_SUCH_VARIABLE"], "HORIZON_TEST_NO_SUCH_VARIABLE is not set or blank"),
])
def test_a_run_that_cannot_mean_anything_is_one_line_and_exit_2(tmp_path, capsys, extra, says):
    code = _main_exit(["--url", "http://127.0.0.1:9", "--out", str(tmp_path / "o"), *extra])
    assert code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing ran


def _main_exit(argv):
    try:
        return runner.main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        return exit_.code


def test_nothing_listening_or_an_unreadable_profile_is_one_line_and_exit_2(tmp_path, capsys):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert runner.main(["--url", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "o")]) == 2
    assert f"nothing answers at http://127.0.0.1:{port} (ConnectError)" in capsys.readouterr().err
    assert runner.main(["--profile", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "cannot read: Is a directory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_run_in_which_no_request_succeeded_exits_1(tmp_path, capsys):
    with FakeOpenAIServer(fail_every_request=True) as srv:
        code = runner.main(["--url", srv.url, "--duration", "20", "--users", "2", "--max-requests", "6",
                            "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert code == 1 and "no request succeeded" in captured.err
    assert '"requests": 6, "succeeded": 0' in captured.out
