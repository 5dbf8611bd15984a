"""A Serve application's detached state actor (breaker registry and demand board) ends once the
application is gone, and only then: absent on consecutive status reads, a failed read being no
evidence. While the application runs this code, it retires the actors of earlier names that an
in-place upgrade left. The e2e proof on a real cluster is in tests/e2e/test_fleet_scaling_state.py."""

from __future__ import annotations

import threading
import types

import pytest

from serve_app import app_state
from serve_app.app_scoped import (STATE_PROTOCOL, ApplicationWatch, end_with_application, retire_superseded_actors,
                                   serve_application_status, state_actor_name, superseded_actor_names)
from serve_app.app_state import ApplicationState


def test_the_watch_ends_only_after_consecutive_absent_reads():
    watch = ApplicationWatch(absent_checks=2)
    assert watch.observe(True) is False
    assert watch.observe(False) is False          # one read: a deploy in flight, a blip
    assert watch.observe(None) is False           # a failed read neither counts nor resets
    assert watch.observe(True) is False           # back: the count starts again
    assert watch.observe(False) is False
    assert watch.observe(None) is False
    assert watch.observe(False) is True


def test_the_watch_needs_at_least_one_read():
    with pytest.raises(ValueError, match="absent_checks"):
        ApplicationWatch(absent_checks=0)


def test_the_thread_ends_the_actor_after_the_application_goes():
    reads = iter(["DEPLOYING", "RUNNING", "", None, "", "RUNNING"])
    asked: list[str] = []
    ended = threading.Event()

    def status(app: str):
        asked.append(app)
        return next(reads)

    thread = end_with_application("canary", interval_s=0.01, absent_checks=2, status=status,
                                  end=ended.set, only_inside_an_actor=False)
    assert thread is not None and thread.daemon
    assert ended.wait(5)
    thread.join(5)
    assert not thread.is_alive()
    assert asked == ["canary"] * 5                # it stopped reading once it ended


def test_the_step_while_running_follows_only_running_reads_and_survives_its_failure():
    reads = iter(["DEPLOYING", "RUNNING", "UNHEALTHY", None, "RUNNING", "RUNNING", "", ""])
    steps: list[int] = []
    ended = threading.Event()

    def step():
        steps.append(len(steps))
        if len(steps) == 1:
            raise RuntimeError("GCS busy")     # logged; the watch goes on

    thread = end_with_application("canary", interval_s=0.01, absent_checks=2, status=lambda _: next(reads),
                                  end=ended.set, while_running=step, only_inside_an_actor=False)
    assert thread is not None and ended.wait(5)
    thread.join(5)
    assert steps == [0, 1, 2]                   # the three RUNNING reads, the first one failing


def test_nothing_is_watched_without_an_application_or_outside_an_actor():
    calls: list[str] = []
    assert end_with_application(None, status=calls.append, only_inside_an_actor=False) is None
    assert end_with_application("", status=calls.append, only_inside_an_actor=False) is None
    # In-process (unit tests, or a driver): no actor to end, so no thread.
    assert end_with_application("sim", status=calls.append) is None
    assert calls == []


def test_the_actor_body_built_in_process_starts_no_watch():
    before = {t.name for t in threading.enumerate()}
    ApplicationState(app_name="sim", watch_interval_s=0.01)
    assert not any(t.name.startswith("watch-") for t in threading.enumerate() if t.name not in before)


def test_the_status_read(monkeypatch):
    from ray import serve
    from ray.serve.schema import ApplicationStatus

    apps = {"sim": types.SimpleNamespace(status=ApplicationStatus.RUNNING),
            "canary": types.SimpleNamespace(status=ApplicationStatus.DEPLOYING)}
    monkeypatch.setattr(serve, "status", lambda: types.SimpleNamespace(applications=apps))
    assert serve_application_status("sim") == "RUNNING"
    assert serve_application_status("canary") == "DEPLOYING"
    assert serve_application_status("prod") == ""

    def down():
        raise RuntimeError("controller restarting")
    monkeypatch.setattr(serve, "status", down)
    assert serve_application_status("sim") is None


# What `ray.util.list_named_actors(all_namespaces=True)` lists on a cluster that ran this
# application ("sim") under every earlier name, beside other applications and other namespaces.
NAMED = [
    {"name": "horizon-state.v2:sim", "namespace": "horizon"},        # this code's: kept
    {"name": "horizon-state.v1:sim", "namespace": "horizon"},        # the first one-actor protocol
    {"name": "horizon-breakers:sim", "namespace": "horizon"},        # the first per-application names
    {"name": "horizon-demand:sim", "namespace": "horizon"},
    {"name": "horizon-breakers.v2:sim", "namespace": "horizon"},     # the names before one actor
    {"name": "horizon-demand.v2:sim", "namespace": "horizon"},
    {"name": "horizon-state.v2:sim2", "namespace": "horizon"},       # another application's
    {"name": "horizon-breakers.v2:sim2", "namespace": "horizon"},
    {"name": "horizon-demand.v2:local", "namespace": "horizon"},
    {"name": "horizon-breakers", "namespace": "horizon"},            # no application in the name
    {"name": "horizon-demand.v2:sim", "namespace": "other"},         # not ours
    {"name": "SERVE_CONTROLLER_ACTOR", "namespace": "serve"},
]


def test_superseded_names_are_this_applications_earlier_ones_in_our_namespace():
    assert superseded_actor_names(NAMED, "sim") == [
        "horizon-breakers.v2:sim", "horizon-breakers:sim", "horizon-demand.v2:sim",
        "horizon-demand:sim", "horizon-state.v1:sim"]
    assert superseded_actor_names(NAMED, "sim2") == ["horizon-breakers.v2:sim2"]
    assert superseded_actor_names(NAMED, "prod") == []
    # A name with regex characters is matched literally.
    assert superseded_actor_names([{"name": "horizon-demand:a.b", "namespace": "horizon"},
                                   {"name": "horizon-demand:axb", "namespace": "horizon"}], "a.b") == [
        "horizon-demand:a.b"]


def test_a_newer_protocols_actor_is_retired_too_so_a_rollback_leaves_none():
    # Rolled back from code of a later protocol: its actor is idle, and this code's retires it.
    newer = [f"horizon-state.v{STATE_PROTOCOL + 1}:sim", f"horizon-state.v{STATE_PROTOCOL + 10}:sim"]
    named = [{"name": name, "namespace": "horizon"} for name in [state_actor_name("sim"), *newer]]
    assert superseded_actor_names(named, "sim") == sorted(newer)


def test_retiring_kills_each_superseded_actor():
    killed: list[str] = []
    retired = retire_superseded_actors("sim2", named=lambda: NAMED, kill=killed.append)
    assert retired == killed == ["horizon-breakers.v2:sim2"]


def test_the_state_actor_retires_earlier_actors_only_while_replicas_of_its_code_report(monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(app_state, "retire_superseded_actors", lambda app: asked.append(app) or ["old"])
    state = ApplicationState(app_name="sim")
    # Nobody reports here (before the first replica of this code, or after a rollback): keep all.
    assert state.retire_superseded_if_in_use() == [] and asked == []
    state.report("replica-a", {"model-k2": 0})
    assert state.retire_superseded_if_in_use() == ["old"] and asked == ["sim"]
    # Outside Serve there is no application to retire anything of.
    state_outside = ApplicationState(app_name=None)
    state_outside.report("replica-a", {})
    assert state_outside.retire_superseded_if_in_use() == [] and asked == ["sim"]


def test_a_report_is_lately_only_within_the_boards_age():
    from deployments.gateway_demand import GatewayDemandBoard

    now = [100.0]
    board = GatewayDemandBoard(max_age_s=3.0, clock=lambda: now[0])
    assert board.reported_lately() is False
    board.report("replica-a", {"model-k2": 1})
    now[0] += 3.0
    assert board.reported_lately() is True
    now[0] += 0.1
    assert board.reported_lately() is False


def test_one_actor_name_per_application_and_protocol():
    assert state_actor_name("sim") == "horizon-state.v2:sim"
    assert state_actor_name("local") != state_actor_name("sim")
    assert state_actor_name(None) == "horizon-state.v2"
