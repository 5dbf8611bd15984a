"""Structured logs: one JSON object per line, each carrying the current ``request_id``.

``configure_logging`` installs one handler on the project's logger namespaces (``serve_app``,
``deployments``) rather than on the root logger, so Ray's and Ray Serve's own log setup in a
replica is left alone, and every line we write is JSON exactly once.

Prompts and completions stay out of logs unless ``global.server.log_payloads`` is on. Code
that wants to log payloads calls :func:`log_payload`, which is a no-op otherwise; as a safety
net the formatter replaces any ``extra`` field named like a payload (``messages``, ``content``,
...) with ``"[redacted]"`` when payload logging is off. Never interpolate payloads into the
message text itself: the formatter cannot recognise them there.
"""

from __future__ import annotations

import json
import logging
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
            if key in PAYLOAD_FIELDS and not self.log_payloads:
                value = REDACTED
            entry[key] = value
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
    """Install (or replace) the Horizon log handler; idempotent. Returns the handler."""
    global _payloads_enabled
    settings = settings or ObservabilitySettings()
    _payloads_enabled = log_payloads
    handler = logging.StreamHandler(stream or sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonLogFormatter(log_payloads=log_payloads) if settings.log_format == "json"
                         else TextLogFormatter())
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
    """Deployment options for Ray Serve's own logging of every deployment the app builds.

    Empty by default, so a ``logging_config`` the operator sets on the Serve application (or
    Serve's defaults) applies unchanged. With ``observability.access_log: false`` every
    deployment gets ``enable_access_log: False``: Serve's replica logger then drops its per-request
    line before formatting or buffering it. ``log_level`` is carried along because a deployment's
    ``logging_config`` replaces the application's as a whole."""
    if settings.access_log:
        return {}
    return {"logging_config": {"enable_access_log": False, "log_level": settings.log_level}}
