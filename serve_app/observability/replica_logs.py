"""Logging of a Ray Serve replica the application builds: one call, ``start_replica_logging``,
from each deployment's constructor. It routes our loggers into Serve's replica log
(``serve_app.observability.logging``) and writes that log out on a clock.

Why the clock: in the fast mode (``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``, what ``horizon
serve``, the tests and the cluster manifest run) Serve puts a ``MemoryHandler`` of
``RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE`` records (1,000) in front of each replica's log file.
It writes the records only when the buffer is full or an ERROR arrives. So a gateway serving a
few requests a minute showed nothing in its replica logs for hours: no access line, no
``request failed`` warning, nothing to find by request id. A replica killed outright (the OOM
killer) lost up to 999 lines, the ones wanted most after it.

Every replica the application builds starts one daemon thread here that flushes those buffers
every ``HORIZON_SERVE_LOG_FLUSH_S`` seconds (default 1; 0 leaves Serve's buffering alone).
Serve's batching is kept: under load the buffer still fills and is written in one go, so the
clock costs nothing measurable; at low rates a line reaches the file within a second.

The same pass puts back a buffer's file when something closed it. vLLM's engine start applies
its logging with ``logging.config.dictConfig``, which closes every handler of the process,
Serve's buffer included: a closed ``MemoryHandler`` drops its target, writes nothing and never
empties again. So a vLLM replica's log stopped at its first line, and every later record (one
access line per request) piled up in memory for the life of the replica.

That dictConfig also gives vLLM's loggers a handler of their own that prints to the replica's
stdout, which Serve turns into INFO lines: a vLLM warning read ``INFO … -- (MainProcess
pid=…) WARNING …``, a level no log query could select. ``route_library_logs`` hands those
records to Serve's replica logger instead, at their own level (the vLLM replica applies vLLM's
setup and routes it before the engine starts: ``deployments/vllm_server.py``).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import threading
import weakref
from typing import Mapping, Optional

from ..config.observability import ObservabilitySettings
from .logging import ServeReplicaHandler, configure_logging, serve_log_buffers, serve_replica_logger

FLUSH_ENV = "HORIZON_SERVE_LOG_FLUSH_S"
DEFAULT_FLUSH_S = 1.0
MAX_FLUSH_S = 3600.0

_lock = threading.Lock()
_flusher: Optional["ServeLogFlusher"] = None
# Each Serve buffer's file handler as Serve set it, to put back after a close dropped it.
_targets: "weakref.WeakKeyDictionary[logging.handlers.MemoryHandler, logging.Handler]" = \
    weakref.WeakKeyDictionary()


def flush_interval_s(env: Mapping[str, str] = os.environ) -> float:
    """The flush interval from ``HORIZON_SERVE_LOG_FLUSH_S``; a bad value fails naming it."""
    raw = env.get(FLUSH_ENV, "").strip()
    if not raw:
        return DEFAULT_FLUSH_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_FLUSH_S:   # also refuses nan
        raise ValueError(f"{FLUSH_ENV} must be a number of seconds from 0 to {MAX_FLUSH_S:g} "
                         f"(0 turns the flush off), got {raw!r}")
    return value


def reattach_serve_logs() -> int:
    """Remember each Serve buffer's file handler, and give one back to a buffer a close left
    without it (a closed file handler reopens its file on the next write). Returns how many
    were given back."""
    given_back = 0
    for buffer in serve_log_buffers():
        if buffer.target is not None:
            _targets[buffer] = buffer.target
        elif buffer in _targets:
            buffer.setTarget(_targets[buffer])
            given_back += 1
    return given_back


def route_library_logs(name: str) -> bool:
    """In a Serve replica, hand the records of a library's logger (``vllm``) to Serve's replica
    logger, each at its own level, in place of the handlers that print them to a stream
    (stdout, which Serve's redirect logs as INFO). The logger's own level is kept. Returns
    False outside a replica, where nothing changes. Call it again after the library
    reconfigures its logging: a dictConfig replaces the logger's handlers."""
    serve_logger = serve_replica_logger()
    if serve_logger is None:
        return False
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        # Exactly StreamHandler: a FileHandler is one too, and is an operator's own file.
        if type(handler) is logging.StreamHandler or isinstance(handler, ServeReplicaHandler):
            logger.removeHandler(handler)
    logger.addHandler(ServeReplicaHandler(serve_logger))
    logger.propagate = False
    return True


def flush_serve_logs() -> None:
    reattach_serve_logs()
    for handler in serve_log_buffers():
        handler.flush()


class ServeLogFlusher(threading.Thread):
    """Flushes the replica logger's buffers every ``interval_s`` until stopped. The handlers
    are looked up on each tick: Serve replaces them when a deployment's ``logging_config``
    changes."""

    def __init__(self, interval_s: float):
        super().__init__(name="horizon-serve-log-flush", daemon=True)
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            try:
                flush_serve_logs()
            except Exception:  # noqa: BLE001 — a failed write must not end the clock
                pass

    def stop(self) -> None:
        self._stop_event.set()


def start_replica_logging(settings: Optional[ObservabilitySettings] = None, *, log_payloads: bool = False,
                          env: Mapping[str, str] = os.environ) -> Optional[ServeLogFlusher]:
    """Every deployment's constructor calls this: our loggers into Serve's replica log (the
    ingress passes the profile's settings; a model replica has the defaults), and this
    process's flusher, started once. Returns the flusher, or None when its interval is 0."""
    configure_logging(settings, log_payloads=log_payloads)
    reattach_serve_logs()
    return start_serve_log_flusher(env)


def start_serve_log_flusher(env: Mapping[str, str] = os.environ) -> Optional[ServeLogFlusher]:
    """Start this process's flusher once; returns it, or None when the interval is 0."""
    global _flusher
    interval = flush_interval_s(env)
    with _lock:
        if _flusher is None and interval > 0:
            _flusher = ServeLogFlusher(interval)
            _flusher.start()
        return _flusher
