"""The gateway's client of a simulated deployment: a handle call's failure becomes a typed error
for chat and text completions alike (a text completion's failure once raised a NameError, a 500
instead of the 502/503 the fallback chain and the breaker act on)."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.errors import ModelUnavailable, UpstreamError
from serve_app.fleet.backends.simulated import SimulatedHandleClient
from fakes.fleet import FakeHandle


class RayActorError(Exception):
    """Named like Ray's: map_ray_error reads the class name."""


def failing_handle(exc: Exception) -> FakeHandle:
    """A handle whose every call raises ``exc`` when awaited."""
    async def fail():
        raise exc
    return FakeHandle(lambda method, body: fail())


class Board:
    def __init__(self):
        self.nudged = 0

    def check(self, deployment, alias):
        pass

    def nudge(self):
        self.nudged += 1


@pytest.mark.parametrize("call, method", [("complete", "chat"), ("complete_text", "completions")])
def test_an_engine_failure_is_an_upstream_error_naming_the_model(call, method):
    handle = failing_handle(RuntimeError("simulated engine failure in coder"))
    client = SimulatedHandleClient("coder", handle, "model-coder")
    with pytest.raises(UpstreamError, match="'coder' failed: simulated engine failure"):
        asyncio.run(getattr(client, call)({"model": "coder", "prompt": "x"}))
    assert [m for m, _ in handle.calls] == [method]


@pytest.mark.parametrize("call", ["complete", "complete_text"])
def test_a_dead_replica_is_unavailable_and_makes_the_board_look_again(call):
    board = Board()
    client = SimulatedHandleClient("coder", failing_handle(RayActorError("gone")), "model-coder", board)
    with pytest.raises(ModelUnavailable):
        asyncio.run(getattr(client, call)({"model": "coder", "prompt": "x"}))
    assert board.nudged == 1
