"""Test-wide settings.

Ray Serve reads its fast-mode switches when the controller and proxy start, and those inherit
this process's environment at ``ray.init``, so they are set here, before any test starts Ray:
the tests run the same mode the project runs by default.
"""

import os

os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
os.environ.setdefault("RAY_SERVE_ENABLE_HA_PROXY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
