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


def test_a_cluster_profile_is_sent_to_its_cluster_not_told_it_has_no_cluster_section(monkeypatch):
    # `horizon serve configs/fleet.yaml` said each model's custom resource is missing because
    # "a profile without a cluster section runs on one plain node": the fleet has one.
    from serve_app.config.loader import load_config

    monkeypatch.setattr(lc, "running_ray_address", lambda: None)
    monkeypatch.setattr(lc, "port_in_use", lambda host, port: False)
    parser = argparse.ArgumentParser()
    serve_cmd.register(parser)
    problem = serve_cmd._preflight(parser.parse_args(["configs/fleet.yaml"]), load_config("configs/fleet.yaml"),
                                   host="127.0.0.1", port=8000)
    assert problem is not None and "without a cluster section" not in problem
    assert "planned for cluster 'k2-horizon' (node types node-a, node-b, node-c)" in problem
    assert "`horizon serve configs/fleet.yaml --address auto` on its head node" in problem
    # A profile without one still gets the plain-node reason.
    local = load_config("configs/local.yaml")
    local.models[0].placement.resources["horizon_node_a"] = 1
    problem = serve_cmd._preflight(_args(), local, host="127.0.0.1", port=8000)
    assert "a profile without a cluster section runs on one plain node" in problem
    assert "planned for cluster" not in problem
