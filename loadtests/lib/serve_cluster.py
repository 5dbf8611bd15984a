"""A local Ray cluster with Serve in the fast mode, for benchmarks (one per benchmark run)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any, Awaitable, Callable, Coroutine, Iterator, Optional, TypeVar

from serve_app.tools.local_cluster import apply_serve_env, free_port  # noqa: F401 - loadtests import free_port from here

T = TypeVar("T")
_handle_loop: Optional[asyncio.AbstractEventLoop] = None


def run_handle_calls(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` (a benchmark's own deployment-handle calls) on this process's one event loop
    for them, which runs in a thread of its own for the life of the process.

    In the fast mode Serve routes a handle's requests, and receives the controller's updates
    about its replicas, on the event loop that first used the handle: a second ``asyncio.run()``
    would find that loop closed, and a loop that only runs during calls misses the updates.
    """
    global _handle_loop
    if _handle_loop is None:
        _handle_loop = asyncio.new_event_loop()
        threading.Thread(target=_handle_loop.run_forever, name="benchmark-handles", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _handle_loop).result()


def timed_handle_calls(call: Callable[[], Awaitable[Any]], runs: int, warmup: int = 3,
                       idle_s: float = 0.0) -> list[float]:
    """Milliseconds of each of ``runs`` sequential awaits of ``call()`` on the handle loop, after
    ``warmup`` untimed ones (the first calls through a handle wait for its replica list).

    ``idle_s``: an untimed pause before each call, so that every call finds the replicas and this
    process idle, as a request reaching a quiet service does. Back to back, each call finds them
    still awake from the one before: on a 2-core VM that is the fastest a call gets.
    """
    async def timed() -> list[float]:
        out = []
        for i in range(warmup + runs):
            if idle_s:
                await asyncio.sleep(idle_s)
            start = time.perf_counter()
            await call()
            if i >= warmup:
                out.append((time.perf_counter() - start) * 1000)
        return out

    return run_handle_calls(timed())


@contextlib.contextmanager
def serve_cluster(*, fast: bool = True) -> Iterator[int]:
    """Start Ray + Serve on a free loopback port; yields the port, shuts both down after.

    The fast-mode switches must be in the environment before Ray starts its controller, and
    before this process first imports ray.serve (its handles read the mode then): with ``fast``,
    an earlier import is a RuntimeError.
    """
    # What `horizon serve` runs the cluster with; HAProxy's own frontends on free ports, as a
    # benchmark may run beside another Serve cluster.
    apply_serve_env(os.environ, fast=fast, free_haproxy_ports=True)
    import ray
    from ray import serve
    from ray.serve._private import constants

    if fast and not constants.RAY_SERVE_THROUGHPUT_OPTIMIZED:
        # Serve reads its mode once, when ray.serve is first imported: a benchmark that imported
        # it earlier would measure its own handle calls (the bare hop, the direct stream) in the
        # default mode against a cluster in the fast one.
        raise RuntimeError("ray.serve was imported before serve_cluster() set the fast-mode "
                           "environment; import ray.serve and serve_app.app inside the with block")
    port = free_port()
    # Logical CPUs: the simulated graph reserves fractions; the machine has 2 real cores.
    ray.init(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield port
    finally:
        try:
            serve.shutdown()
        except RuntimeError:
            pass  # a handle bound to an already closed event loop; Ray's shutdown below cleans up
        ray.shutdown()
