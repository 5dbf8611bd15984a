"""``horizon serve --dashboard``: Ray Serve's own CLI against the profile ``horizon serve``
started, the way an operator checks and redeploys a Serve application.

Without the flag Ray runs no dashboard (the quick start's memory figure), and ``horizon
status`` says how to get one; with it, ``serve status`` (Ray's CLI, speaking the cluster's
token authentication as the console line says) reports the application, and ``horizon stop``
stops the dashboard with everything else. Runs in the ``firstrun`` pytest process: ``horizon
serve`` starts its own Ray only when none is running.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from test_first_run import BASE, ROOT, clean_env, horizon, port_open

SERVE = str(ROOT / ".venv" / "bin" / "serve") if (ROOT / ".venv" / "bin" / "serve").exists() \
    else str(Path(sys.executable).with_name("serve"))

pytestmark = [pytest.mark.e2e, pytest.mark.firstrun]


@pytest.fixture(scope="module")
def with_dashboard():
    """``horizon serve configs/local.yaml --dashboard --non-blocking``; yields its output."""
    assert not port_open(8000), "port 8000 must be free: the other first-run modules stop theirs"
    started = horizon("serve", "configs/local.yaml", "--dashboard", "--non-blocking", timeout=900)
    try:
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        yield started.stdout
    finally:
        stopped = horizon("stop", timeout=300)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_the_console_names_the_dashboard_and_how_serve_status_reaches_it(with_dashboard):
    line = re.search(r"horizon: Ray dashboard: (http://127\.0\.0\.1:(\d+)) \((.*?)serve status", with_dashboard)
    assert line, with_dashboard[-2000:]
    assert line.group(3) in ("", "RAY_AUTH_MODE=token ")
    status = horizon("status")
    assert status.returncode == 0 and f"Ray dashboard: {line.group(1)}" in status.stdout, status.stdout


def test_serve_status_reports_the_application(with_dashboard):
    url, auth = re.search(r"Ray dashboard: (\S+) \((RAY_AUTH_MODE=token )?serve status", with_dashboard).groups()
    env = clean_env(**({"RAY_AUTH_MODE": "token"} if auth else {}))
    out = subprocess.run([SERVE, "status", "-a", url], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    app = yaml.safe_load(out.stdout)["applications"]["horizon"]
    assert app["status"] == "RUNNING"
    assert {"ingress", "model-k2", "model-bge-m3"} <= set(app["deployments"])
    assert httpx.get(f"{BASE}/health", timeout=30).json()["status"] == "ready"


def _dashboard(with_dashboard: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """The dashboard's URL, the environment Serve's CLI needs, and the REST API's headers."""
    url, auth = re.search(r"Ray dashboard: (\S+) \((RAY_AUTH_MODE=token )?serve status", with_dashboard).groups()
    headers = {}
    if auth:
        token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        headers["Authorization"] = f"Bearer {os.environ.get('RAY_AUTH_TOKEN') or token_file.read_text().strip()}"
    return url, clean_env(**({"RAY_AUTH_MODE": "token"} if auth else {})), headers


def _replicas(url: str, headers: dict[str, str]) -> tuple[str, str, dict[str, list[str]]]:
    """The application's source (declarative: deployed from a config), its status, and each
    deployment's replica ids, from the dashboard's REST API (what `serve status` reads)."""
    app = httpx.get(f"{url}/api/serve/applications/", headers=headers, timeout=30).json()["applications"]["horizon"]
    return app["source"], app["status"], {name: sorted(r["replica_id"] for r in dep["replicas"])
                                           for name, dep in app["deployments"].items()}


def test_serve_deploy_of_the_unchanged_profile_restarts_nothing(with_dashboard):
    """`horizon serve` hands Serve the profile as the Serve config it is, so the `serve deploy
    configs/local.yaml` an operator runs next (say, after an edit they then reverted) is a no-op:
    every deployment keeps its replica and the engine keeps answering. Deployed through
    `serve.run` before, every deployment had a version of its own, and that deploy restarted all
    of them: k2's engine reloaded and text requests got 503 meanwhile."""
    url, env, headers = _dashboard(with_dashboard)
    config = subprocess.run([SERVE, "config", "-a", url], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=env)
    assert "import_path: serve_app.app:build_app" in config.stdout, config.stdout + config.stderr
    source, status, before = _replicas(url, headers)
    assert (source, status) == ("declarative", "RUNNING") and before["model-k2"], before
    deployed = subprocess.run([SERVE, "deploy", "configs/local.yaml", "-a", url], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, env=env)
    assert deployed.returncode == 0, deployed.stdout[-2000:] + deployed.stderr[-2000:]
    # A changed version puts the application in DEPLOYING at once (seen with the old deploy, at
    # the first look), then rebuilds it and stops k2's replica: watch a while, asking k2 all along.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _source, status, now = _replicas(url, headers)
        assert (status, now) == ("RUNNING", before)
        answer = httpx.post(f"{BASE}/v1/chat/completions", timeout=120, json={
            "model": "k2", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
        assert answer.status_code == 200, answer.text
        time.sleep(2)


def test_stop_stops_the_dashboard_too(with_dashboard):
    url = re.search(r"Ray dashboard: http://127\.0\.0\.1:(\d+)", with_dashboard)
    assert url
    stopped = horizon("stop", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not port_open(8000) and not port_open(int(url.group(1)))
    # Serve's own INFO lines stay off the console.
    assert "INFO" not in stopped.stdout + stopped.stderr, stopped.stdout + stopped.stderr
