"""The ingress process's cyclic garbage collector, tuned for a request-serving event loop.

Every request allocates a few hundred container objects (the body, the pipeline's dicts, Ray's
request metadata, Starlette's scope), and with 64 requests in flight many of them survive a
young collection. With Python's default first-generation threshold (700) the ingress ran ~140
young and ~14 middle collections a second at 700 requests/s, about 8 % of its time, on the one
event loop that serves every request. A higher threshold collects the same garbage in fewer,
not much longer passes. And a replica builds most of its heap once (configuration, routing
artefacts, Ray and pydantic internals): freezing it once routing is ready keeps full
collections from walking it again and again. Freezing only affects the cyclic collector;
objects whose last reference goes are still freed at once.

Both are process-wide, so only the Serve replica calls them (``serve_app.app``), never the
in-process test gateway. ``global.server.gc_gen0_threshold`` / ``gc_freeze_after_start``.
"""

from __future__ import annotations

import gc
import logging
from typing import Optional

log = logging.getLogger("ray.serve")


def tune_collector(gen0_threshold: Optional[int]) -> None:
    """Raise the first generation's threshold (None: keep Python's default)."""
    if gen0_threshold is not None:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0_threshold, gen1, gen2)


def freeze_startup_heap() -> int:
    """Collect what start-up left behind, then freeze everything alive; returns how many
    objects are now frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen: %d objects out of the collector's reach", frozen)
    return frozen
