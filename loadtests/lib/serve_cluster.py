"""A local Ray cluster with Serve in the fast mode, for benchmarks (one per benchmark run)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from serve_app.tools.local_cluster import free_port  # noqa: F401 - loadtests import it from here


@contextlib.contextmanager
def serve_cluster(*, fast: bool = True) -> Iterator[int]:
    """Start Ray + Serve on a free loopback port; yields the port, shuts both down after.

    The fast-mode switches must be in the environment before Ray starts its controller.
    """
    if fast:
        os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
        os.environ.setdefault("RAY_SERVE_ENABLE_HA_PROXY", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # HAProxy's metrics/stats frontends default to fixed ports; avoid clashing with another
    # Serve cluster on the same machine.
    os.environ.setdefault("RAY_SERVE_HAPROXY_METRICS_PORT", str(free_port()))
    os.environ.setdefault("RAY_SERVE_HAPROXY_STATS_PORT", str(free_port()))
    import ray
    from ray import serve

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
