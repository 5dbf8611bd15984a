"""Who may call and what is remembered for them: sessions (SPEC §7) and API keys."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from .base import PathError, Strict

class SessionSettings(Strict):
    """Conversation history per client session, one bucket per task type (SPEC §7).

    A request forwards only its own task type's bucket, so code history never inflates a chat
    model's context. See docs/sessions.md.
    """

    enabled: bool = True
    # ``inprocess`` keeps history in the ingress replica (single replica / development);
    # ``redis`` shares it across ingress replicas and restarts.
    backend: Literal["inprocess", "redis"] = "inprocess"
    redis_url: str = Field("redis://127.0.0.1:6379/0", pattern=r"^(redis|rediss|unix)://\S+$")
    # Every Redis key is ``{key_prefix}{session_id}:{task_type}``.
    key_prefix: str = Field("horizon:session:", min_length=1)
    # Idle lifetime of a bucket, refreshed on every write (24 h per SPEC §7).
    ttl_s: float = Field(86400.0, gt=0)
    # Newest messages kept per bucket; older ones are dropped when a turn is appended.
    max_messages: int = Field(200, ge=2)
    # Request header naming the session; without it a request is stateless.
    # An HTTP field name (RFC 9110 token): one with a space or a colon could never be sent.
    header: str = Field("X-Session-ID", pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    max_session_id_length: int = Field(128, ge=8, le=1024)
    # Per-command Redis deadline: an unreachable Redis must cost a request milliseconds, not
    # seconds, because the request is then served without history anyway.
    redis_timeout_s: float = Field(0.5, gt=0)
    # Buckets the in-process store keeps before evicting the least recently written.
    inprocess_max_buckets: int = Field(10000, ge=1)
    # Tokens of the target model's context left free for the answer when trimming history
    # (used when the request sets no max_tokens).
    output_reserve_tokens: int = Field(1024, ge=0)
    # Responses API (``POST /v1/responses``): keep each answered response, with its turn, so
    # ``previous_response_id`` can continue it and ``GET /v1/responses/{id}`` return it (OpenAI's
    # ``store``, true unless the request says false), and serve the Conversations API
    # (``/v1/conversations``, ``conversation`` on a response). Same backend as history.
    store_responses: bool = True
    # How long a stored response or a conversation lives after it was last written or continued
    # (reading it does not restart the clock).
    responses_ttl_s: float = Field(86400.0, gt=0)
    # Every Redis key is ``{responses_key_prefix}{response id}``.
    responses_key_prefix: str = Field("horizon:response:", min_length=1)
    # The Conversations API's conversations (same switch, backend and TTL as stored responses):
    # ``{conversations_key_prefix}{conversation id}``.
    conversations_key_prefix: str = Field("horizon:conversation:", min_length=1)
    # Bytes of stored responses (their JSON) the in-process store keeps before evicting the
    # oldest, and as much again for conversations: a record holds one turn, tool outputs
    # included, so sizes differ by orders of magnitude.
    inprocess_max_response_bytes: int = Field(64 * 1024 * 1024, ge=1024)


class ApiKeySettings(Strict):
    """One API key. The plain key is never in the profile: give its SHA-256 (``horizon
    hash-key``) or the name of an environment variable holding it (hashed at startup)."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    sha256: Optional[str] = Field(None, pattern=r"^[0-9a-f]{64}$")
    env: Optional[str] = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # None = no restriction; a list restricts to those fleet aliases / decision names.
    allowed_models: Optional[list[str]] = None
    allowed_decisions: Optional[list[str]] = None
    fusion_allowed: bool = True
    # Whether the key may name its own Fusion panel (``plugins[].analysis_models``); without
    # it the key runs the operator's Fusion decisions only (403 naming the parameter). Either
    # way a panel has at most ``global.integrations.looper.fusion.max_panel_size`` members.
    fusion_request_panels: bool = True
    # Token bucket per key: refills at requests_per_minute / 60 per second; None = unlimited.
    requests_per_minute: Optional[int] = Field(None, ge=1)
    # Requests a key may send at once after being idle; default: requests_per_minute.
    burst: Optional[int] = Field(None, ge=1)

    @field_validator("sha256", mode="before")
    @classmethod
    def _lower_hex(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> "ApiKeySettings":
        if (self.sha256 is None) == (self.env is None):
            raise ValueError("give exactly one of 'sha256' (hex digest of the key) or 'env' "
                             "(environment variable holding the key)")
        return self


class AuthSettings(Strict):
    """Optional Bearer API keys with per-key permissions and rate limits."""

    enabled: bool = False
    keys: list[ApiKeySettings] = Field(default_factory=list)
    # Where the per-key token buckets live. ``inprocess``: in each ingress replica, so N
    # replicas admit up to N times a key's rate; ``redis``: one bucket per key shared by every
    # replica (falls back to the replica's own bucket while Redis is unreachable).
    rate_limit_store: Literal["inprocess", "redis"] = "inprocess"
    # None = ``sessions.redis_url`` (filled in at load): one Redis usually serves both.
    redis_url: Optional[str] = Field(None, pattern=r"^(redis|rediss|unix)://\S+$")
    # Every bucket is the hash ``{redis_key_prefix}{key name}``.
    redis_key_prefix: str = Field("horizon:ratelimit:", min_length=1)
    # Per-command deadline. The check runs before every limited request, so an unreachable
    # Redis must cost milliseconds; the request is then limited by the local bucket instead.
    redis_timeout_s: float = Field(0.25, gt=0)

    @model_validator(mode="after")
    def _keys(self) -> "AuthSettings":
        if self.enabled and not self.keys:
            raise PathError("keys", "auth is enabled but no keys are configured")
        names = [k.name for k in self.keys]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PathError("keys", f"duplicate key names: {dupes}")
        digests = [k.sha256 for k in self.keys if k.sha256]
        if len(digests) != len(set(digests)):
            raise PathError("keys", "two keys share one sha256")
        return self
