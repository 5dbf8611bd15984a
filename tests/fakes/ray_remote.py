"""``ray.remote`` for unit tests of code that creates named, shared actors.

``ray.remote(cls).options(**opts).remote(*args)`` records ``opts`` per class and returns one
instance per actor name, created on first use (what ``get_if_exists=True`` does on a cluster),
passed through ``wrap`` (an actor-handle lookalike, or the instance itself).
"""

from __future__ import annotations

from typing import Any, Callable


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
