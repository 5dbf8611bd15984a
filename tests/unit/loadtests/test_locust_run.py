"""The real locustfile, run headless by the runner against a fake endpoint on 127.0.0.1."""

import csv
import subprocess
import sys
import time

from fake_openai_server import TOKENS, FakeOpenAIServer

from loadtests import runner
from loadtests.lib.scenarios import build_scenario


def test_runner_drives_locust_and_stops_at_the_request_bound(tmp_path):
    with FakeOpenAIServer() as srv:
        s = runner.RunSettings(url=srv.url, scenario=build_scenario("step", 20, 3, base_users=1, step_at_s=1),
                               out_dir=tmp_path, max_requests=40, poll_interval_s=0.2, window_s=1)
        started = time.monotonic()
        result = runner.run_load(s)
        elapsed = time.monotonic() - started
        summary = runner.write_report(result, s).read_text()
    assert result.returncode == 0
    # Bounded by the request count: exactly 40 sent, long before the 20 s scenario ends.
    assert len(result.records) == 40 == len(srv.requests)
    assert elapsed < 20
    streams = [r for r in result.records if r.stream]
    assert streams and all(r.ok and r.ttft_s is not None and r.ttft_s <= r.e2el_s for r in streams)
    assert all(r.output_tokens == TOKENS and len(r.itl_s) == TOKENS - 1 for r in streams)
    assert {r.decision for r in result.records} <= {"code", "general_chat"}
    assert {r.model for r in result.records} <= {"coder", "qwen-72b"}
    # Per-decision / per-model rows come from the custom event in locust's own CSV.
    with (tmp_path / "locust_stats.csv").open() as f:
        rows = {(r["Type"], r["Name"]) for r in csv.DictReader(f)}
    assert ("E2EL decision", "general_chat") in rows and ("E2EL model", "qwen-72b") in rows
    assert ("TTFT", "qwen-72b") in rows
    assert (tmp_path / "replicas.csv").read_text().count("qwen-72b") >= 1
    assert "Request goodput (req/s)" in summary and (tmp_path / "latency.png").exists()


def test_locustfile_refuses_a_remote_host(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", str(runner.LOCUSTFILE), "--headless",
                           "--host", "http://10.9.8.7:8000"], capture_output=True, text=True, timeout=60,
                          cwd=runner.ROOT, env={**runner.locust_env(runner.RunSettings(
                              url="http://127.0.0.1:1", scenario=build_scenario("constant", 2, 1),
                              out_dir=tmp_path), tmp_path / "r.jsonl")})
    assert proc.returncode != 0
    assert "refusing to load-test" in proc.stderr + proc.stdout
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").read_text() == ""
