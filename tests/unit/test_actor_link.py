"""ActorLink: the handle kept until a call on it fails, then looked up again (with a back-off)."""

from __future__ import annotations

import threading
import time

import pytest

from serve_app.actor_link import ActorLink, ActorUnreachable

pytestmark = pytest.mark.asyncio


class Lookups:
    """``connect``: hands out a new handle each call, or raises while ``gone``."""

    def __init__(self):
        self.calls = 0
        self.gone = False

    def __call__(self):
        self.calls += 1
        if self.gone:
            raise ValueError("Failed to look up actor 'horizon-state.v2:sim'")
        return f"handle-{self.calls}"


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_the_handle_is_kept_until_a_call_on_it_fails():
    lookups = Lookups()
    link = ActorLink(lookups)
    assert link.current is None and link.generation == 0
    first = await link.get()
    assert await link.get() == first and lookups.calls == 1 and link.generation == 1
    link.failed(first)
    assert link.current is None
    second = await link.get()
    assert second != first and lookups.calls == 2 and link.generation == 2


async def test_a_failure_on_an_older_handle_keeps_the_newer_one():
    """Two calls in flight on the same handle both fail: the second report must not drop the
    handle the first one's retry already got."""
    lookups = Lookups()
    link = ActorLink(lookups)
    old = await link.get()
    link.failed(old)
    new = await link.get()
    link.failed(old)
    assert link.current == new and await link.get() == new and lookups.calls == 2


async def test_without_connect_the_given_handle_is_kept():
    link = ActorLink(None, "the-handle")
    assert link.generation == 1
    link.failed("the-handle")
    assert await link.get() == "the-handle" and link.generation == 1
    with pytest.raises(ValueError):
        ActorLink(None)


async def test_a_failed_lookup_raises_and_backs_off_before_looking_again():
    lookups, clock = Lookups(), Clock()
    link = ActorLink(lookups, retry_s=5.0, clock=clock)
    lookups.gone = True
    with pytest.raises(ActorUnreachable, match="Failed to look up actor"):
        await link.get()
    lookups.gone = False
    clock.t += 4.9
    with pytest.raises(ActorUnreachable, match="moments ago"):
        await link.get()
    assert lookups.calls == 1                         # no lookup during the back-off
    clock.t += 0.2
    assert await link.get() == "handle-2" and link.generation == 1


async def test_a_failed_call_backs_off_too():
    lookups, clock = Lookups(), Clock()
    link = ActorLink(lookups, retry_s=5.0, clock=clock)
    link.failed(await link.get())
    with pytest.raises(ActorUnreachable):
        await link.get()
    clock.t += 5.0
    assert await link.get() == "handle-2"


async def test_a_lookup_that_hangs_gives_up_after_the_timeout():
    release = threading.Event()

    def hanging():
        release.wait(5.0)
        return "late"

    link = ActorLink(hanging, timeout_s=0.05)
    started = time.monotonic()
    try:
        with pytest.raises(ActorUnreachable):
            await link.get()
        assert time.monotonic() - started < 2.0
        assert link.current is None
    finally:
        release.set()
