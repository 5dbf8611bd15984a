"""Load tests hit this machine only: a load generator pointed elsewhere is an attack."""

from __future__ import annotations

from urllib.parse import urlsplit

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class TargetRefused(ValueError):
    """The target URL is not a loopback HTTP address."""


def check_local_target(url: str) -> str:
    """Return ``url`` without a trailing slash if it is http(s) on 127.0.0.1/localhost/::1."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"{url!r}: only http:// or https:// targets")
    if parts.hostname not in LOCAL_HOSTS:
        raise TargetRefused(f"{url!r}: load tests only run against {sorted(LOCAL_HOSTS)}")
    if parts.username or parts.password:
        raise TargetRefused(f"{url!r}: no credentials in the URL")
    return url.rstrip("/")
