"""The request id that follows one request end to end (SPEC §6).

A client may send ``X-Request-ID``; a safe value is kept (so a client's own trace id shows up
in our logs), anything else is replaced by a fresh id. The id lives in a context variable:
asyncio copies the context into every task a request spawns, so panel calls and signal tasks
log the same id without passing it around.
"""

from __future__ import annotations

import re
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Optional

REQUEST_ID_HEADER = "X-Request-ID"

# Printable, no spaces or quotes: it goes into log lines and response headers verbatim.
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$")

request_id_var: ContextVar[Optional[str]] = ContextVar("horizon_request_id", default=None)


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


def resolve_request_id(header_value: Optional[str]) -> str:
    """The client's ``X-Request-ID`` when it is safe to echo, else a new id."""
    if header_value is not None:
        value = header_value.strip()
        if _SAFE_ID.match(value):
            return value
    return new_request_id()


def current_request_id() -> Optional[str]:
    return request_id_var.get()


@contextmanager
def bound_request_id(request_id: str) -> Iterator[str]:
    """Make ``request_id`` the current one for the duration of a request."""
    token = request_id_var.set(request_id)
    try:
        yield request_id
    finally:
        request_id_var.reset(token)
