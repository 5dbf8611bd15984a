"""Headless load test of a running K2 Horizon endpoint: locust + replica polling + report.

One command:

    python -m loadtests.runner --profile configs/sim.yaml --scenario step --duration 60 \\
        --users 24 --out loadtests/results/sim-step

reads the endpoint from the profile's ``http_options`` (or ``--url http://127.0.0.1:8000``),
runs ``loadtests/locustfile.py`` headless for the scenario, polls ``GET /health`` for replicas
per model meanwhile, and writes to ``--out``:

* ``records.jsonl`` — one line per request (timings, decision, model, status);
* ``locust_stats.csv``, ``locust_stats_history.csv``, ``locust_failures.csv`` — locust's CSVs,
  with per-decision (``E2EL decision``), per-model (``E2EL model``) and ``TTFT`` rows;
* ``replicas.csv`` — replicas per model over time;
* ``summary.md`` — vLLM's metric names (TTFT, TPOT, ITL, E2EL, goodput at the stated SLOs);
* ``latency.png`` and ``replicas.png``.

``--start`` starts the profile first as an operator does (``horizon serve --non-blocking``) and
stops it after the run. Only loopback targets are accepted, and every run is bounded by
``--duration`` and ``--max-requests``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from loadtests.lib.plots import ReplicaSample, plot_latency, plot_replicas
from loadtests.lib.replicas import ReplicaPoller, write_replicas_csv
from loadtests.lib.scenarios import Scenario, build_scenario
from loadtests.lib.summary import SLO, markdown_report, read_records
from loadtests.lib.targets import check_local_target
from loadtests.lib.timing import RequestRecord
from loadtests.lib.traffic import TrafficSettings
from serve_app.config.arguments import fraction, positive_number, whole_number
from serve_app.config.loader import ConfigError, read_document, serve_http
from serve_app.tools.http import ToolUsageError, ensure_listening, make_client

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
ROOT = LOCUSTFILE.parents[1]
# Locust stops users at the scenario's end; streams in flight get this long to finish.
STOP_TIMEOUT_S = 30
# Beyond the scenario and the stop timeout, locust gets this long to start and write its CSVs
# before the runner kills it: the hard bound on a run.
HARD_MARGIN_S = 60


def start_profile(profile: str) -> str:
    """Start ``profile`` the way an operator does, ``horizon serve PROFILE --non-blocking`` (Ray
    with this machine's own CPUs, the fast Serve mode, its readiness wait), and return its base
    URL once ready. A profile horizon serve would refuse raises :class:`ConfigError` before
    anything starts; a start that fails raises RuntimeError. Stop it with :func:`stop_profile`."""
    from serve_app.tools.serve_config import load_serve_profile  # imports Ray: only for --start

    load_serve_profile(profile)
    code = subprocess.run([sys.executable, "-m", "serve_app.cli", "serve", str(profile), "--non-blocking"],
                          cwd=ROOT).returncode
    if code != 0:
        raise RuntimeError(f"horizon serve {profile} failed (exit {code}); its lines above say why")
    return url_from_profile(profile)


def stop_profile() -> None:
    """Stop what :func:`start_profile` started (``horizon stop``)."""
    subprocess.run([sys.executable, "-m", "serve_app.cli", "stop"], cwd=ROOT, check=False)


def url_from_profile(profile: str | Path) -> str:
    """Endpoint of a Serve config file: http_options host/port + the first app's route prefix.
    A file that cannot be read, or a host, port or prefix Serve could not listen on, raises
    :class:`ConfigError` naming it."""
    host, port, prefix = serve_http(read_document(profile))
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}{prefix.rstrip('/')}"


@dataclass
class RunSettings:
    url: str
    scenario: Scenario
    out_dir: Path
    traffic: TrafficSettings = field(default_factory=TrafficSettings)
    max_requests: int = 10000
    slo: SLO = field(default_factory=SLO)
    poll_interval_s: float = 1.0
    window_s: float = 5.0
    seed: int = 0
    api_key: Optional[str] = None
    title: str = "K2 Horizon load test"


@dataclass
class RunResult:
    t0: float
    records: list[RequestRecord]
    replicas: list[ReplicaSample]
    returncode: int
    out_dir: Path


def locust_env(s: RunSettings, records_path: Path) -> dict[str, str]:
    t = s.traffic
    env = dict(os.environ)
    env.update({
        "LOADTEST_STAGES": s.scenario.to_json(),
        "LOADTEST_MAX_REQUESTS": str(s.max_requests),
        "LOADTEST_RECORDS": str(records_path),
        "LOADTEST_MIX": ",".join(f"{k}={v}" for k, v in t.mix.items()),
        "LOADTEST_FUSION_SHARE": str(t.fusion_share),
        "LOADTEST_STREAM_SHARE": str(t.stream_share),
        "LOADTEST_MODELS": ",".join(t.models),
        "LOADTEST_MAX_TOKENS": str(t.max_tokens or 0),
        "LOADTEST_SEED": str(s.seed),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    })
    if s.api_key:
        env["LOADTEST_API_KEY"] = s.api_key
    return env


def locust_command(s: RunSettings) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", s.url,
            "--csv", str(s.out_dir / "locust"), "--csv-full-history", "--stop-timeout", str(STOP_TIMEOUT_S),
            "--only-summary", "--loglevel", "WARNING"]


def run_load(s: RunSettings) -> RunResult:
    """Run one bounded locust test against ``s.url`` while polling replicas."""
    s.url = check_local_target(s.url)
    s.out_dir.mkdir(parents=True, exist_ok=True)
    records_path = s.out_dir / "records.jsonl"
    records_path.write_text("", encoding="utf-8")
    t0 = time.time()
    with ReplicaPoller(s.url, interval_s=s.poll_interval_s) as poller:
        try:
            proc = subprocess.run(locust_command(s), env=locust_env(s, records_path), cwd=ROOT,
                                  timeout=s.scenario.duration_s + STOP_TIMEOUT_S + HARD_MARGIN_S)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    write_replicas_csv(poller.samples, s.out_dir / "replicas.csv")
    return RunResult(t0, read_records(records_path), poller.samples, code, s.out_dir)


def step_marks(scenario: Scenario) -> list[tuple[float, str]]:
    """Vertical lines where the user count changes."""
    marks, users = [], None
    start = 0.0
    for stage in scenario.stages:
        if users is not None and stage.users != users:
            marks.append((start, f"{users}→{stage.users} users"))
        users, start = stage.users, stage.until_s
    return marks


def write_report(result: RunResult, s: RunSettings, notes: Sequence[str] = ()) -> Path:
    """summary.md + latency.png + replicas.png in the output folder; returns summary.md."""
    marks = step_marks(s.scenario)
    images = [plot_latency(result.records, s.out_dir / "latency.png", t0=result.t0, window_s=s.window_s,
                           marks=marks)]
    if result.replicas:
        images.append(plot_replicas(result.replicas, s.out_dir / "replicas.png", t0=result.t0, marks=marks))
    t = s.traffic
    all_notes = [f"target {s.url}, scenario {s.scenario.name} ({s.scenario.duration_s:g} s, stages "
                 + ", ".join(f"{st.users} users until {st.until_s:g} s" for st in s.scenario.stages) + ")",
                 "mix " + ", ".join(f"{k} {v:.0%}" for k, v in t.mix.items())
                 + f"; Fusion share {t.fusion_share:.0%}; streaming share {t.stream_share:.0%}; "
                 f"models {', '.join(t.models)}; max_tokens {t.max_tokens}",
                 f"locust exit code {result.returncode}", *notes]
    path = s.out_dir / "summary.md"
    path.write_text(markdown_report(result.records, s.slo, title=s.title, notes=all_notes,
                                    images=[str(i) for i in images]), encoding="utf-8")
    return path


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.runner", description=__doc__.split("\n\n")[0])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="base URL of a running endpoint (loopback only)")
    target.add_argument("--profile", help="Serve config YAML; the URL comes from its http_options")
    p.add_argument("--start", action="store_true",
                   help="start --profile first (horizon serve --non-blocking) and stop it after the run")
    p.add_argument("--scenario", choices=("constant", "step", "ramp"), default="constant")
    p.add_argument("--duration", type=positive_number, default=60.0, help="seconds (bounded)")
    p.add_argument("--users", type=whole_number(1), default=8, help="concurrent users (after the step)")
    p.add_argument("--base-users", type=whole_number(0), default=1, help="users before the step")
    p.add_argument("--step-at", type=positive_number, default=None, help="seconds; default a third in")
    p.add_argument("--max-requests", type=whole_number(1), default=10000, help="stop after this many requests")
    p.add_argument("--mix", default=None, help='e.g. "chat=0.3,code=0.2,vision=0.15,reasoning=0.2,complex=0.15"')
    p.add_argument("--fusion-share", type=fraction, default=0.0)
    p.add_argument("--stream-share", type=fraction, default=0.5)
    p.add_argument("--models", default="vllm-sr/auto", help="comma-separated request model values")
    p.add_argument("--max-tokens", type=whole_number(0), default=64, help="0: requests carry none")
    p.add_argument("--slo", nargs="*", default=None, metavar="METRIC:MS",
                   help="goodput SLOs, vLLM syntax (ttft:2000 tpot:100 e2el:20000, the default)")
    p.add_argument("--poll-interval", type=positive_number, default=1.0, help="seconds between /health polls")
    p.add_argument("--window", type=positive_number, default=5.0, help="seconds per point of the latency plot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key-env", default=None, help="environment variable holding a Bearer key")
    p.add_argument("--out", required=True, help="output folder, e.g. loadtests/results/sim-step")
    return p.parse_args(argv)


def settings_from_args(args: argparse.Namespace, url: str) -> RunSettings:
    """The run's settings; ValueError naming the argument when they cannot make a run."""
    from loadtests.lib.traffic import SEED_MIX, parse_mix

    if args.scenario != "step" and args.step_at is not None:
        raise ValueError(f"--step-at only applies to --scenario step (this run is {args.scenario!r})")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env, "").strip()
        if not api_key:  # every request would be a 401: no load test
            raise ValueError(f"--api-key-env: environment variable {args.api_key_env} is not set or blank")
    traffic = TrafficSettings(mix=parse_mix(args.mix) if args.mix else dict(SEED_MIX),
                              fusion_share=args.fusion_share, stream_share=args.stream_share,
                              models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
                              max_tokens=args.max_tokens or None)
    return RunSettings(
        url=check_local_target(url),
        scenario=build_scenario(args.scenario, args.duration, args.users, base_users=args.base_users,
                                step_at_s=args.step_at),
        out_dir=Path(args.out), traffic=traffic, max_requests=args.max_requests,
        slo=SLO() if args.slo is None else SLO.parse(args.slo), poll_interval_s=args.poll_interval,
        window_s=args.window, seed=args.seed, api_key=api_key)


def check_listening(url: str) -> None:
    """ValueError in one line when nothing answers at ``url``: otherwise locust runs the whole
    scenario into connection errors and the report is a table of them."""
    async def probe() -> None:
        async with make_client(url, api_key=None, timeout_s=10) as client:
            await ensure_listening(client)
    try:
        asyncio.run(probe())
    except ToolUsageError as exc:
        raise ValueError(str(exc)) from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.start and not args.profile:
        print("--start needs --profile", file=sys.stderr)
        return 2
    started = False
    try:
        try:
            settings = settings_from_args(args, args.url or url_from_profile(args.profile))
            if args.start:
                start_profile(args.profile)
                started = True
            check_listening(settings.url)
        except (ValueError, ConfigError) as exc:  # a usage mistake: one line, exit 2
            print(f"python -m loadtests.runner: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:  # horizon serve said why
            print(f"python -m loadtests.runner: {exc}", file=sys.stderr)
            return 1
        return _run_and_report(settings)
    finally:
        if started:
            stop_profile()


def _run_and_report(settings: RunSettings) -> int:
    result = run_load(settings)
    summary = write_report(result, settings)
    print(summary.read_text(encoding="utf-8"))
    succeeded = sum(1 for r in result.records if r.ok)
    print(json.dumps({"out": str(settings.out_dir), "requests": len(result.records), "succeeded": succeeded,
                      "locust_exit": result.returncode}))
    if not succeeded:
        print("python -m loadtests.runner: no request succeeded", file=sys.stderr)
    return 0 if succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
