"""``horizon serve --dashboard``: Ray's dashboard, which Ray's own CLI (`serve status`, `serve
deploy`) talks to, is off by default (≈ 200 MB of PSS on a laptop) and on when asked for; the
console and ``horizon status`` say where it is, or how to get it. (The e2e test
tests/e2e/test_serve_dashboard.py runs `serve status` against it.)"""

from __future__ import annotations

import argparse

import pytest

from serve_app.tools import local_cluster as lc
from serve_app.tools import serve as serve_cmd


def _state(**kw) -> lc.ServeState:
    return lc.ServeState(pid=1, config="configs/local.yaml", host="127.0.0.1", port=8000,
                         route_prefix="/", app_name="horizon", **kw)


def test_ray_starts_without_a_dashboard_unless_asked():
    off = serve_cmd.ray_start_command(6379, 8080, None, log_monitor=False)
    assert "--include-dashboard=false" in off and not any(a.startswith("--dashboard-") for a in off)
    assert "--include-log-monitor=false" in off
    on = serve_cmd.ray_start_command(6379, 8080, 18265, log_monitor=True)
    assert "--include-dashboard=true" in on and "--include-dashboard=false" not in on
    # Loopback only: the dashboard can deploy code, so it is not opened to the network.
    assert "--dashboard-host=127.0.0.1" in on and "--dashboard-port=18265" in on
    assert "--include-log-monitor=false" not in on


def test_the_state_says_where_the_dashboard_is_and_how_ray_cli_reaches_it():
    at_default = _state(dashboard_url="http://127.0.0.1:8265", token_auth=True).dashboard_line()
    assert at_default == ("Ray dashboard: http://127.0.0.1:8265 (RAY_AUTH_MODE=token serve status, "
                          "serve deploy, the web UI)")
    moved = _state(dashboard_url="http://127.0.0.1:18265").dashboard_line()
    assert moved is not None and "(serve status -a http://127.0.0.1:18265," in moved
    off = _state().dashboard_line()
    assert off is not None and "off" in off and "horizon serve --dashboard" in off
    # A cluster horizon serve did not start keeps its operator's dashboard: nothing to say.
    assert _state(owns_cluster=False).dashboard_line() is None


def test_the_record_keeps_the_dashboard_across_commands(tmp_path, monkeypatch):
    monkeypatch.setenv(lc.STATE_DIR_ENV, str(tmp_path))
    _state(dashboard_url="http://127.0.0.1:8265", token_auth=True).save()
    loaded = lc.ServeState.load()
    assert loaded is not None and loaded.dashboard_url == "http://127.0.0.1:8265" and loaded.token_auth


def test_dashboard_with_an_existing_cluster_is_refused_naming_both():
    parser = argparse.ArgumentParser()
    serve_cmd.register(parser)
    args = parser.parse_args(["configs/local.yaml", "--address", "auto", "--dashboard"])
    problem = serve_cmd._preflight(args, cfg=None, host="127.0.0.1", port=8000)
    assert problem is not None and "--dashboard" in problem and "auto" in problem


@pytest.mark.parametrize("argv,expected", [([], False), (["--dashboard"], True)])
def test_the_flag(argv, expected):
    parser = argparse.ArgumentParser()
    serve_cmd.register(parser)
    assert parser.parse_args(["configs/local.yaml", *argv]).dashboard is expected
