"""Tests that configure logging put the loggers back as they found them."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import serve_app.observability.logging as obs_logging


@contextmanager
def loggers_restored(*names: str) -> Iterator[None]:
    """Restore each named logger's handlers, level and propagation, and payload logging off."""
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level,
                 logging.getLogger(n).propagate) for n in names}
    try:
        yield
    finally:
        for name, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate
        obs_logging._payloads_enabled = False
