"""Optional Bearer API keys: who is calling (401), what they may reach (403), how often (429).

Keys are held only as SHA-256 digests. A profile gives either the digest (``horizon hash-key``
prints it) or the name of an environment variable holding the plain key, which is hashed when
the authenticator is built and never kept. Lookup hashes the presented key and compares
digests, so the plain key of a client exists only for the duration of one call.

With ``auth.enabled: false`` every request is the anonymous principal: all models, decisions
and Fusion, no rate limit.

Rate limits are token buckets per key (:mod:`serve_app.auth.ratelimit`), kept in the ingress
replica or, with ``auth.rate_limit_store: redis``, in Redis shared by every replica
(:mod:`serve_app.auth.redis_ratelimit`). :meth:`ApiKeyAuthenticator.check_rate` is therefore
async; authentication and authorisation need no I/O and stay sync.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from ..config.access import AuthSettings, SessionSettings
from ..errors import AuthenticationError, PermissionDenied, RateLimited
from ..observability.metrics import record_auth_rejection
from .ratelimit import RateLimiter, RateLimitStore
from .redis_ratelimit import RedisRateLimiter


def hash_key(plain_key: str) -> str:
    """The hex SHA-256 digest stored in a profile for ``plain_key``, without its surrounding
    whitespace: the gateway strips the header's token, so that is the only key a client can
    present (a Kubernetes secret made from a file keeps the file's last newline)."""
    return hashlib.sha256(plain_key.strip().encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """The caller a request acts for."""

    name: str
    # None = unrestricted.
    allowed_models: Optional[frozenset[str]] = None
    allowed_decisions: Optional[frozenset[str]] = None
    fusion_allowed: bool = True
    fusion_request_panels: bool = True
    requests_per_minute: Optional[int] = None
    burst: Optional[int] = None

    @property
    def anonymous(self) -> bool:
        return self.name == ANONYMOUS.name

    def may_use_model(self, alias: str) -> bool:
        return self.allowed_models is None or alias in self.allowed_models

    @property
    def may_route(self) -> bool:
        """Whether an auto model can serve this key at all (some decision is allowed)."""
        return self.allowed_decisions is None or bool(self.allowed_decisions)


ANONYMOUS = Principal(name="anonymous")


def build_rate_limiter(settings: AuthSettings, *,
                       clock: Optional[Callable[[], float]] = None) -> RateLimitStore:
    """The limiter ``auth.rate_limit_store`` names. ``clock`` drives the in-process buckets
    (tests); the Redis buckets use the Redis server's clock."""
    local = RateLimiter(clock) if clock is not None else RateLimiter()
    if settings.rate_limit_store != "redis":
        return local
    # A profile fills redis_url from sessions.redis_url at load; an AuthSettings built on its
    # own (tests, tools) gets the sessions default the same way.
    url = settings.redis_url or SessionSettings().redis_url
    return RedisRateLimiter(url, key_prefix=settings.redis_key_prefix,
                            timeout_s=settings.redis_timeout_s, fallback=local)


class ApiKeyAuthenticator:
    def __init__(self, settings: AuthSettings, *, environ: Optional[Mapping[str, str]] = None,
                 clock: Optional[Callable[[], float]] = None,
                 limiter: Optional[RateLimitStore] = None):
        """Raises ValueError naming the key when an ``env`` key's variable is unset or empty:
        a replica that would silently lock a client out must not start."""
        self.enabled = settings.enabled
        environ = os.environ if environ is None else environ
        self._by_digest: dict[str, Principal] = {}
        for i, key in enumerate(settings.keys):
            if key.sha256 is not None:
                digest = key.sha256
            else:
                plain = environ.get(key.env or "", "")
                if not plain.strip():
                    raise ValueError(f"auth.keys[{i}] ({key.name}): environment variable "
                                     f"{key.env} is not set or blank")
                digest = hash_key(plain)
            self._by_digest[digest] = Principal(
                name=key.name,
                allowed_models=frozenset(key.allowed_models) if key.allowed_models is not None else None,
                allowed_decisions=(frozenset(key.allowed_decisions)
                                   if key.allowed_decisions is not None else None),
                fusion_allowed=key.fusion_allowed,
                fusion_request_panels=key.fusion_request_panels,
                requests_per_minute=key.requests_per_minute,
                burst=key.burst,
            )
        self._limiter = limiter if limiter is not None else build_rate_limiter(settings, clock=clock)

    def authenticate(self, authorization_header: Optional[str]) -> Principal:
        """The principal of an ``Authorization: Bearer <key>`` header; 401 when missing/wrong."""
        if not self.enabled:
            return ANONYMOUS
        if not authorization_header or not authorization_header.strip():
            record_auth_rejection("unauthenticated")
            raise AuthenticationError(
                "Missing API key: send it as 'Authorization: Bearer <key>'.")
        scheme, _, token = authorization_header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            record_auth_rejection("unauthenticated")
            raise AuthenticationError("Malformed Authorization header: expected 'Bearer <key>'.")
        presented = hash_key(token)
        # Compare against every digest in constant time: no timing hint of how close a guess is.
        found: Optional[Principal] = None
        for digest, principal in self._by_digest.items():
            if hmac.compare_digest(digest, presented):
                found = principal
        if found is None:
            record_auth_rejection("unauthenticated")
            raise AuthenticationError("Invalid API key.")
        return found

    def authorize(self, principal: Principal, *, model: Optional[str], decision: Optional[str],
                  fusion: bool, request_panel: Optional[str] = None) -> None:
        """403 unless the principal may use ``model`` (a fleet alias), ``decision`` (a routing
        decision name), when ``fusion`` Fusion, and when ``request_panel`` (the parameter that
        names it, ``plugins[i].analysis_models``) a Fusion panel of its own choosing. None skips
        that check, so the ingress can check the requested alias before routing and the
        decision after it."""
        if model is not None and principal.allowed_models is not None \
                and model not in principal.allowed_models:
            self._deny(f"API key '{principal.name}' may not use model '{model}'.", "model")
        if decision is not None and principal.allowed_decisions is not None \
                and decision not in principal.allowed_decisions:
            self._deny(f"API key '{principal.name}' may not use routing decision '{decision}'.", "model")
        if fusion and not principal.fusion_allowed:
            self._deny(f"API key '{principal.name}' may not use Fusion.", "model")
        if fusion and request_panel is not None and not principal.fusion_request_panels:
            self._deny(f"API key '{principal.name}' may not name its own Fusion panel; use a "
                       "Fusion decision of the profile instead.", request_panel)

    @staticmethod
    def _deny(message: str, param: str) -> None:
        record_auth_rejection("forbidden")
        raise PermissionDenied(message, param=param, code="permission_denied")

    async def check_rate(self, principal: Principal) -> None:
        """429 with Retry-After when the principal's token bucket is empty."""
        if principal.requests_per_minute is None:
            return
        wait_s = await self._limiter.take(principal.name, principal.requests_per_minute, principal.burst)
        if wait_s is not None:
            record_auth_rejection("rate_limited")
            raise RateLimited(
                f"Rate limit of {principal.requests_per_minute} requests per minute exceeded for "
                f"API key '{principal.name}'; retry in {wait_s:.1f}s.", retry_after=wait_s)

    async def store_health(self) -> Optional[dict]:
        """The rate-limit store's health (None when no key has a limit: nothing is stored)."""
        if not self.enabled or all(p.requests_per_minute is None for p in self._by_digest.values()):
            return None
        return await self._limiter.health()

    async def aclose(self) -> None:
        """Close the rate limiter's connections (a Redis client)."""
        await self._limiter.aclose()
