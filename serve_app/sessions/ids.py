"""The client-chosen session id (``X-Session-ID`` by default, ``sessions.header``)."""

from __future__ import annotations

import re
from typing import Mapping, Optional

from ..errors import InvalidRequest
from ..config.access import SessionSettings

# The id becomes part of a Redis key and of log lines: no spaces, quotes or control characters.
_SAFE_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")


def session_id_from_headers(headers: Mapping[str, str], settings: SessionSettings) -> Optional[str]:
    """The request's session id, None when it names none (or sessions are off).

    Raises InvalidRequest (400) for a malformed id: silently ignoring it would drop the
    client's history without telling it why.
    """
    if not settings.enabled:
        return None
    wanted = settings.header.lower()
    value = next((v for k, v in headers.items() if k.lower() == wanted), None)
    if value is None or not value.strip():
        return None
    value = value.strip()
    if len(value) > settings.max_session_id_length or not _SAFE_SESSION_ID.match(value):
        raise InvalidRequest(
            f"{settings.header} must be 1-{settings.max_session_id_length} characters of "
            "letters, digits and . _ : @ - (starting with a letter or digit)",
            param=settings.header, code="invalid_session_id")
    return value


def scoped_session_id(session_id: Optional[str], owner: Optional[str]) -> Optional[str]:
    """The id the store keys history by: with API keys on, ``{key name}/{session id}``, so
    one client cannot read another's conversation by sending the same header value. ``/``
    appears in neither a key name nor a session id, so two scopes never collide."""
    if session_id is None or owner is None:
        return session_id
    return f"{owner}/{session_id}"
