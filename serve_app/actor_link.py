"""A replica's link to the application's state actor: one handle, got again after a call fails.

Three holders call the state actor (``serve_app.app_state``) for as long as their replica runs:
an ingress replica's breaker store and demand publisher, and a model replica's demand reader.
A crash of the actor needs nothing from them (Ray restarts it behind the same handle), but an
actor that ended for good does: its watch saw the application absent, or an operator killed
it. A replica's demand publisher then makes a new one under the same name, and a holder that
kept its old handle would call a dead actor for as long as its replica runs. So each holder
asks its :class:`ActorLink` for the handle before a call and tells it when a call failed; the
next :meth:`ActorLink.get` looks the actor up again.

Plain Python (``connect`` is whatever gets the handle), so the unit tests run it without Ray.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional


class ActorUnreachable(Exception):
    """:meth:`ActorLink.get` found no handle: the lookup failed, timed out, or waits out its
    back-off after an earlier failure."""


class ActorLink:
    """The handle ``connect()`` returns, kept until a call on it fails.

    - ``handle``: one to start with (the caller already holds it); None: connect on first use.
    - ``connect``: called in a thread (it blocks on Ray's GCS) when there is no handle. None
      keeps ``handle`` for good (:meth:`failed` then changes nothing).
    - ``timeout_s``: how long a lookup may take before :meth:`get` gives up (None: no limit).
    - ``retry_s``: after a failed lookup or call, how long :meth:`get` raises at once instead of
      looking up again (0: look up on the next call), so a caller that runs often does not
      put a lookup on every call while the actor is gone.
    """

    def __init__(self, connect: Optional[Callable[[], Any]], handle: Any = None, *,
                 timeout_s: Optional[float] = None, retry_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        if connect is None and handle is None:
            raise ValueError("ActorLink needs a handle or a way to connect")
        self._connect = connect
        self._handle: Any = handle
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._clock = clock
        self._next_lookup = 0.0
        # How many handles this link has held: a holder that set the actor up (the breaker
        # store's settings) does it again when this changes.
        self.generation = 0 if handle is None else 1

    @property
    def current(self) -> Any:
        """The handle held now (None after a failure, until the next :meth:`get`)."""
        return self._handle

    async def get(self) -> Any:
        """The handle; looked up first when there is none. Raises :class:`ActorUnreachable`
        when the lookup fails or the back-off after an earlier failure still runs."""
        if self._handle is not None:
            return self._handle
        if self._clock() < self._next_lookup:
            raise ActorUnreachable("the state actor was unreachable moments ago")
        lookup = asyncio.to_thread(self._connect)  # type: ignore[arg-type]
        try:
            handle = await (lookup if self._timeout_s is None else asyncio.wait_for(lookup, self._timeout_s))
        except Exception as exc:  # noqa: BLE001 — a missing actor, a timeout, a GCS error alike
            self._back_off()
            raise ActorUnreachable(f"state actor lookup failed: {exc!r}") from exc
        self._handle = handle
        self.generation += 1
        return handle

    def failed(self, handle: Any) -> None:
        """A call on ``handle`` failed: look the actor up again before the next call (unless a
        newer handle came meanwhile, or there is no ``connect``)."""
        if self._connect is not None and handle is self._handle:
            self._handle = None
            self._back_off()

    def _back_off(self) -> None:
        self._next_lookup = self._clock() + self._retry_s
