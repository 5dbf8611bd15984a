"""Our log lines: each with the current ``request_id``, and in a Serve replica in its log file.

``configure_logging`` installs one handler on the project's logger namespaces (``serve_app``,
``deployments``) rather than on the root logger, so Ray's own log setup is left alone.

- **In a Ray Serve replica** the handler hands each record to Serve's replica logger
  (``ray.serve``): our lines land in the replica's file under ``logs/serve/`` beside Serve's
  own (the access line, ``request failed``), at their own level, tagged with the request id and
  the replica, in the format the deployment's Serve ``logging_config`` asks for (``encoding:
  JSON`` for JSON lines). Before, they went to the process's stderr: a worker's ``.err`` file
  in Serve's default mode, and in the fast mode (stderr redirected into Serve's logger) an INFO
  line whatever their level, so a warning never counted as one.
- **Elsewhere** (outside Serve, tests) it writes one line per record to a stream: JSON, or
  text with ``observability.log_format: text``.

Prompts and completions stay out of logs unless ``global.server.log_payloads`` is on. Code
that wants to log payloads calls :func:`log_payload`, which is a no-op otherwise; as a safety
net any ``extra`` field named like a payload (``messages``, ``content``, ...) is replaced with
``"[redacted]"`` when payload logging is off, on both paths. Never interpolate payloads into
the message text itself: nothing can recognise them there.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from datetime import datetime, timezone
from typing import Any, Iterable, Optional, TextIO

from ..config.observability import ObservabilitySettings
from .request_id import current_request_id, request_id_var  # noqa: F401  (re-exported)

PAYLOAD_FIELDS: frozenset[str] = frozenset({
    "messages", "prompt", "prompts", "content", "completion", "completions", "choices",
    "input", "inputs", "text", "texts", "response", "request_body", "response_body",
    "tool_calls", "arguments",
})
REDACTED = "[redacted]"
DEFAULT_LOGGERS: tuple[str, ...] = ("serve_app", "deployments")
SERVE_LOGGER = "ray.serve"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "request_id", "taskName"}
# Marks the handler we installed so reconfiguring replaces it instead of stacking another.
_HANDLER_MARK = "_horizon_handler"

_payloads_enabled = False


def payloads_enabled() -> bool:
    return _payloads_enabled


class RequestIdFilter(logging.Filter):
    """Stamps ``record.request_id`` from the context of the thread/task that logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id() or "-"
        return True


def _redacted(key: str, value: Any, log_payloads: bool) -> Any:
    return REDACTED if key in PAYLOAD_FIELDS and not log_payloads else value


def serve_log_buffers() -> list[logging.handlers.MemoryHandler]:
    """The buffers Serve puts in front of a replica's log file (``MemoryHandler``, in either
    mode; none outside a replica)."""
    return [h for h in logging.getLogger(SERVE_LOGGER).handlers
            if isinstance(h, logging.handlers.MemoryHandler)]


def serve_replica_logger() -> Optional[logging.Logger]:
    """Serve's replica logger, when this process is a Serve replica."""
    return logging.getLogger(SERVE_LOGGER) if serve_log_buffers() else None


class ServeReplicaHandler(logging.Handler):
    """Hands our records to Serve's replica logger, payload-named ``extra`` fields redacted
    first (Ray's formatters print a record's extra fields)."""

    def __init__(self, serve_logger: logging.Logger, *, log_payloads: bool = False):
        super().__init__()
        self.serve_logger = serve_logger
        self.log_payloads = log_payloads

    def emit(self, record: logging.LogRecord) -> None:
        try:
            for key in PAYLOAD_FIELDS.intersection(vars(record)):
                setattr(record, key, _redacted(key, getattr(record, key), self.log_payloads))
            self.serve_logger.handle(record)
        except Exception:  # noqa: BLE001 — as every logging handler: report, never raise
            self.handleError(record)


class JsonLogFormatter(logging.Formatter):
    def __init__(self, *, log_payloads: bool = False):
        super().__init__()
        self.log_payloads = log_payloads

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", None) or current_request_id() or "-",
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in _STANDARD_ATTRS or key.startswith("_"):
                continue
            entry[key] = _redacted(key, value, self.log_payloads)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextLogFormatter(logging.Formatter):
    """Human-readable variant for local debugging (``observability.log_format: text``)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")


def configure_logging(settings: Optional[ObservabilitySettings] = None, *, log_payloads: bool = False,
                      stream: Optional[TextIO] = None,
                      loggers: Iterable[str] = DEFAULT_LOGGERS) -> logging.Handler:
    """Install (or replace) the Horizon log handler; idempotent. Returns the handler.

    In a Serve replica (and no ``stream`` given) records go to Serve's replica logger, which
    formats them (``log_format`` reaches it as ``logging_config.encoding``, see
    :func:`serve_logging_options`)."""
    global _payloads_enabled
    settings = settings or ObservabilitySettings()
    _payloads_enabled = log_payloads
    serve_logger = serve_replica_logger() if stream is None else None
    handler: logging.Handler
    if serve_logger is not None:
        handler = ServeReplicaHandler(serve_logger, log_payloads=log_payloads)
    else:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.addFilter(RequestIdFilter())
        handler.setFormatter(TextLogFormatter() if settings.log_format == "text"
                             else JsonLogFormatter(log_payloads=log_payloads))
    setattr(handler, _HANDLER_MARK, True)
    for name in loggers:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(settings.log_level)
        # One line per record: parents (root, Ray's handlers) would print it again as text.
        logger.propagate = False
    return handler


def log_payload(logger: logging.Logger, event: str, **payload: Any) -> None:
    """Log prompt/completion content, only when the operator turned ``log_payloads`` on."""
    if _payloads_enabled:
        logger.info(event, extra=payload)


def serve_logging_options(settings: ObservabilitySettings) -> dict[str, Any]:
    """Deployment options for Ray Serve's logging of every deployment the app builds.

    Empty by default, so a ``logging_config`` the operator sets on the Serve application (or
    Serve's defaults) applies unchanged. ``observability.log_format`` sets Serve's ``encoding``
    (our lines are formatted by Serve in a replica, so it applies to them too). With
    ``observability.access_log: false`` Serve's replica logger drops its per-request line before
    formatting or buffering it. ``log_level`` and the access log are always carried along,
    because a deployment's ``logging_config`` replaces the application's as a whole."""
    if settings.access_log and settings.log_format is None:
        return {}
    config: dict[str, Any] = {"enable_access_log": settings.access_log, "log_level": settings.log_level}
    if settings.log_format is not None:
        config["encoding"] = settings.log_format.upper()
    return {"logging_config": config}
