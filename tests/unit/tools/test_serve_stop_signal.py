"""Ctrl-C (or SIGTERM) reaches `horizon serve`'s clean shutdown wherever it lands.

Found in a CI run: the SIGINT landed inside ``serve.status()`` of the progress loop, whose
``except Exception`` (for a controller slow to answer) caught the stop signal's exception; its
empty message then raised IndexError, and `horizon serve` exited 1 ("failed") instead of 0.
"""

from __future__ import annotations

import pytest

from serve_app.tools import local_cluster as lc
from serve_app.tools import serve as serve_cmd

STATE = lc.ServeState(pid=0, config="configs/local.yaml", host="127.0.0.1", port=8000,
                      route_prefix="/", app_name="horizon")


def test_a_stop_signal_inside_the_status_call_is_not_taken_for_a_slow_controller(monkeypatch):
    def status():
        serve_cmd._on_sigterm(2, None)   # the handler runs inside the call, as a signal does
    monkeypatch.setattr(serve_cmd.serve, "status", status)
    with pytest.raises(serve_cmd._Stop):
        serve_cmd._watch(STATE, started=0.0, ready_timeout=600, non_blocking=False)
    assert not issubclass(serve_cmd._Stop, Exception)


def test_a_controller_error_without_a_message_is_named_by_its_type(monkeypatch, capsys):
    def status():
        raise RuntimeError("")
    monkeypatch.setattr(serve_cmd.serve, "status", status)
    monkeypatch.setattr(serve_cmd.time, "sleep", lambda s: None)
    monkeypatch.setattr(serve_cmd, "get_health", lambda url: None)
    assert serve_cmd._watch(STATE, started=0.0, ready_timeout=1e9, non_blocking=False) == 1
    out = capsys.readouterr().out
    assert "Serve's controller did not answer: RuntimeError" in out and "giving up" in out
