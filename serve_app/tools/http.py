"""The HTTP side shared by the operator tools: loopback-only targets and one typed call result.

The tools send real traffic (hundreds of kilobytes per over-long smoke request, a whole
evaluation set), so they only talk to an endpoint on this machine: an operator runs them on
the head node or through a port-forward, never across the network by accident.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


class ToolUsageError(Exception):
    """A command-line mistake (bad target, unknown model, unreadable file): exit status 2."""


def loopback_base_url(url: str) -> str:
    """``url`` without a trailing slash, or ToolUsageError when it is not http(s) on loopback."""
    try:
        parsed = httpx.URL(url)
    except Exception as exc:  # noqa: BLE001 — httpx raises several types for bad URLs
        raise ToolUsageError(f"invalid URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ToolUsageError(f"invalid URL {url!r}: expected http(s)://HOST[:PORT]")
    host = parsed.host
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ToolUsageError(f"refusing to send traffic to {host!r}: only loopback targets "
                             "(127.0.0.1, ::1, localhost) are allowed; port-forward a remote endpoint")
    return str(parsed).rstrip("/")


def make_client(base_url: str, *, api_key: Optional[str], timeout_s: float,
                max_connections: int = 16,
                transport: Optional[httpx.AsyncBaseTransport] = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # trust_env=False: a proxy from the environment must not capture loopback traffic.
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s,
                             trust_env=False, follow_redirects=False, transport=transport,
                             limits=httpx.Limits(max_connections=max_connections))


async def ensure_listening(client: httpx.AsyncClient) -> None:
    """ToolUsageError in one line when nothing answers at the client's base URL: otherwise every
    request of the run fails the same way and the report is a table of connection errors."""
    try:
        await client.get("/health", timeout=10)
    except httpx.TransportError as exc:
        raise ToolUsageError(f"nothing answers at {client.base_url} ({type(exc).__name__}): start the "
                             "profile with `horizon serve CONFIG`, or pass --url") from None


@dataclass
class CallResult:
    """One HTTP call: the status and JSON body when the server answered, else the error."""

    status: Optional[int]
    elapsed_s: float
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    error: Optional[str] = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def error_code(self) -> Optional[str]:
        err = self.body.get("error") if isinstance(self.body, dict) else None
        return err.get("code") if isinstance(err, dict) else None

    @property
    def error_message(self) -> str:
        if self.error:
            return self.error
        err = self.body.get("error") if isinstance(self.body, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return f"HTTP {self.status}: {err['message']}"
        return f"HTTP {self.status}"

    @property
    def message(self) -> dict[str, Any]:
        """The assistant message of a chat completion body ({} when there is none)."""
        choices = self.body.get("choices") if isinstance(self.body, dict) else None
        if not choices or not isinstance(choices[0], dict):
            return {}
        message = choices[0].get("message")
        return message if isinstance(message, dict) else {}

    @property
    def content(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""


async def post_json(client: httpx.AsyncClient, path: str, payload: dict[str, Any]) -> CallResult:
    start = time.perf_counter()
    try:
        response = await client.post(path, json=payload)
    except httpx.TimeoutException as exc:
        return CallResult(None, time.perf_counter() - start, error=f"client timeout ({type(exc).__name__})",
                          timed_out=True)
    except httpx.HTTPError as exc:
        return CallResult(None, time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - start
    try:
        body = response.json()
    except ValueError:
        body = None
    return CallResult(response.status_code, elapsed, body=body,
                      headers={k.lower(): v for k, v in response.headers.items()},
                      timed_out=response.status_code == 504)
