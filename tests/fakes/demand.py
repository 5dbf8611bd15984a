"""A Ray actor handle lookalike for the gateway's demand board (``deployments.gateway_demand``):
``handle.method.remote(...)`` is awaitable, and the test can make the board unreachable or slow."""

from __future__ import annotations

import asyncio

from deployments.gateway_demand import GatewayDemandBoard


class _Remote:
    def __init__(self, fn, handle):
        self._fn, self._handle = fn, handle

    def remote(self, *args):
        async def call():
            self._handle.calls += 1
            if self._handle.down:
                raise ConnectionError("board actor unreachable")
            if self._handle.delay_s:
                await asyncio.sleep(self._handle.delay_s)
            return self._fn(*args)
        return call()


class FakeBoardHandle:
    """``handle.method.remote(...)`` is awaitable, like a Ray actor handle."""

    def __init__(self, board: GatewayDemandBoard):
        self.calls, self.down, self.delay_s = 0, False, 0.0
        self.report = _Remote(board.report, self)
        self.waiting = _Remote(board.waiting, self)
