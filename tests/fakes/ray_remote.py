"""``ray.remote`` for unit tests of code that creates named, shared actors.

``ray.remote(cls).options(**opts).remote(*args)`` records ``opts`` per class and returns one
instance per actor name, created on first use (what ``get_if_exists=True`` does on a cluster),
passed through ``wrap`` (an actor-handle lookalike, or the instance itself).

:class:`FakeActorHandle` is that lookalike: an actor's body behind awaitable method calls.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable


class _Method:
    def __init__(self, fn: Callable[..., Any], handle: "FakeActorHandle"):
        self._fn, self._handle = fn, handle

    def remote(self, *args: Any) -> Any:
        async def call() -> Any:
            self._handle.remote_calls += 1
            if self._handle.down:
                raise ConnectionError("actor unreachable")
            if self._handle.delay_s:
                await asyncio.sleep(self._handle.delay_s)
            result = self._fn(*args)
            # An async actor method (a long poll) runs on the caller's loop, as on the actor's.
            return await result if inspect.isawaitable(result) else result
        return call()


class FakeActorHandle:
    """Looks like a Ray actor handle over ``body`` (the actor class's instance):
    ``handle.method.remote(...)`` is awaitable. The test counts calls (``remote_calls``), makes
    the actor unreachable (``down``: ConnectionError) or slow (``delay_s``)."""

    def __init__(self, body: Any):
        self._body = body
        self.remote_calls = 0
        self.down = False
        self.delay_s = 0.0

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._body, name), self)


class FakeRayRemote:
    def __init__(self, wrap: Callable[[Any], Any] = lambda instance: instance):
        self.options: dict[str, dict[str, Any]] = {}   # class name -> the last options given
        self.actors: dict[str, Any] = {}               # actor name -> the one instance
        self._wrap = wrap

    def remote(self, cls: type) -> Any:
        fake = self

        class _Options:
            def options(self, **opts: Any) -> Any:
                fake.options[cls.__name__] = opts

                class _Creator:
                    def remote(self, *args: Any, **kwargs: Any) -> Any:
                        name = opts.get("name", cls.__name__)
                        if name not in fake.actors:
                            fake.actors[name] = cls(*args, **kwargs)
                        return fake._wrap(fake.actors[name])
                return _Creator()
        return _Options()
