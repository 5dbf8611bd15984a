"""A Serve application's detached state actor (breaker registry and demand board) ends once the
application is gone, and only then: absent on consecutive status reads, a failed read being no
evidence. The e2e proof on a real cluster is in tests/e2e/test_fleet_scaling_state.py."""

from __future__ import annotations

import threading
import types

import pytest

from serve_app.app_scoped import (ApplicationWatch, end_with_application, serve_application_present,
                                   state_actor_name)
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
    reads = iter([True, True, False, None, False, True])
    asked: list[str] = []
    ended = threading.Event()

    def present(app: str):
        asked.append(app)
        return next(reads)

    thread = end_with_application("canary", interval_s=0.01, absent_checks=2, present=present,
                                  end=ended.set, only_inside_an_actor=False)
    assert thread is not None and thread.daemon
    assert ended.wait(5)
    thread.join(5)
    assert not thread.is_alive()
    assert asked == ["canary"] * 5                # it stopped reading once it ended


def test_nothing_is_watched_without_an_application_or_outside_an_actor():
    calls: list[str] = []
    assert end_with_application(None, present=calls.append, only_inside_an_actor=False) is None
    assert end_with_application("", present=calls.append, only_inside_an_actor=False) is None
    # In-process (unit tests, or a driver): no actor to end, so no thread.
    assert end_with_application("sim", present=calls.append) is None
    assert calls == []


def test_the_actor_body_built_in_process_starts_no_watch():
    before = {t.name for t in threading.enumerate()}
    ApplicationState(app_name="sim", watch_interval_s=0.01)
    assert not any(t.name.startswith("watch-") for t in threading.enumerate() if t.name not in before)


def test_the_status_read(monkeypatch):
    from ray import serve

    monkeypatch.setattr(serve, "status", lambda: types.SimpleNamespace(applications={"sim": object()}))
    assert serve_application_present("sim") is True
    assert serve_application_present("canary") is False

    def down():
        raise RuntimeError("controller restarting")
    monkeypatch.setattr(serve, "status", down)
    assert serve_application_present("sim") is None


def test_one_actor_name_per_application_and_protocol():
    assert state_actor_name("sim") == "horizon-state.v1:sim"
    assert state_actor_name("local") != state_actor_name("sim")
    assert state_actor_name(None) == "horizon-state.v1"
