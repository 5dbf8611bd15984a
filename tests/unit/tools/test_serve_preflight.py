"""``horizon serve`` beside a running Ray cluster refuses, and names the way out: ``horizon
stop`` for the cluster a ``horizon serve`` started (even one that was killed and left it
running), ``ray stop`` or ``--address auto`` for anyone else's."""

from __future__ import annotations

import argparse

import pytest

from serve_app.tools import local_cluster as lc
from serve_app.tools import serve as serve_cmd


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_cmd.register(parser)
    return parser.parse_args(["configs/local.yaml"])


@pytest.mark.parametrize("record, hint", [
    (None, "stop it with `ray stop`, or deploy into it with --address auto"),
    # A horizon serve killed with SIGKILL: its pid is gone, its cluster still runs.
    (dict(pid=999_999_999, gcs_address="192.0.2.2:6379"), "`horizon stop` stops it"),
    # Another cluster than the one recorded (the record is stale).
    (dict(pid=999_999_999, gcs_address="192.0.2.2:61000"), "stop it with `ray stop`"),
    (dict(pid=999_999_999, gcs_address="192.0.2.2:6379", owns_cluster=False), "stop it with `ray stop`"),
])
def test_the_refusal_names_the_way_out(tmp_path, monkeypatch, record, hint):
    monkeypatch.setenv(lc.STATE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(lc, "running_ray_address", lambda: "192.0.2.2:6379")
    if record is not None:
        lc.ServeState(config="configs/local.yaml", host="127.0.0.1", port=8000, route_prefix="/",
                      app_name="horizon", **record).save()
    problem = serve_cmd._preflight(_args(), cfg=None, host="127.0.0.1", port=8000)
    assert problem is not None and "a Ray cluster is already running on this machine" in problem
    assert hint in problem, problem
