"""One step run again and again on the running event loop: an ingress replica's background work
(the breaker registry's sync, the demand board's reports, the gauges).

A step that raises is counted and logged, once when it starts failing and once when it works
again (a registry that is down for a minute would otherwise log at every interval), and the
loop goes on: background work must never take requests down with it. Cancelling is the only
way out (:meth:`Periodic.aclose`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional, Union

log = logging.getLogger("ray.serve")


class Periodic:
    """``step()`` every ``interval_s`` seconds (a number, or a callable read before each wait)."""

    def __init__(self, step: Callable[[], Awaitable[None]], interval_s: Union[float, Callable[[], float]],
                 *, failing: str, recovered: str):
        self._step = step
        self._interval = interval_s if callable(interval_s) else (lambda: interval_s)
        self._failing_msg = failing
        self._recovered_msg = recovered
        self.failures = 0
        self._failing = False
        self._task: Optional[asyncio.Task] = None

    async def run(self) -> None:
        while True:
            try:
                await self._step()
                if self._failing:
                    self._failing = False
                    log.info(self._recovered_msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — see the module's docstring
                self.failures += 1
                if not self._failing:
                    self._failing = True
                    log.warning("%s (%s)", self._failing_msg, exc)
            await asyncio.sleep(self._interval())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start on the running event loop (idempotent; RuntimeError when there is none)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
