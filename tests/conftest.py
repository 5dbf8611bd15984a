"""Test-wide settings.

Ray Serve reads its fast-mode switches when the controller and proxy start, and those inherit
this process's environment at ``ray.init``, so they are set here, before any test starts Ray:
the tests run the same mode the project runs by default.
"""

import os
import socket


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
os.environ.setdefault("RAY_SERVE_ENABLE_HA_PROXY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# HAProxy's own metrics and stats frontends bind fixed ports (9101, 8404) by default: a second
# Serve cluster on the machine (a developer's `horizon serve`, another test run) would make
# HAProxy crash at start-up. Tests use free ports instead.
os.environ.setdefault("RAY_SERVE_HAPROXY_METRICS_PORT", str(_free_port()))
os.environ.setdefault("RAY_SERVE_HAPROXY_STATS_PORT", str(_free_port()))
