"""The one place where an internal failure becomes an OpenAI error.

Every layer raises a :class:`HorizonError` subclass; the ingress turns it into the OpenAI body
``{"error": {"message", "type", "param", "code"}}`` with the right HTTP status. Nothing else in
the project builds error bodies.
"""

from __future__ import annotations

from typing import Any, Optional


class HorizonError(Exception):
    status: int = 500
    type: str = "server_error"
    code: Optional[str] = None

    def __init__(self, message: str, *, param: Optional[str] = None, code: Optional[str] = None,
                 status: Optional[int] = None, retry_after: Optional[float] = None,
                 details: Optional[dict[str, Any]] = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.retry_after = retry_after
        # Extra facts (e.g. Fusion failures, raw model output) kept for the trace.
        self.details = details or {}
        # Response headers gathered before the failure (e.g. the routing decision's x-vsr-*),
        # so an error still says where the request was routed.
        self.extra_headers: dict[str, str] = {}

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"message": self.message, "type": self.type,
                               "param": self.param, "code": self.code}
        if self.details:
            err["details"] = self.details
        return {"error": err}

    def headers(self) -> dict[str, str]:
        headers = dict(self.extra_headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, int(round(self.retry_after))))
        return headers


class InvalidRequest(HorizonError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class AuthenticationError(HorizonError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(HorizonError):
    status = 403
    type = "permission_error"


class ModelNotFound(HorizonError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLarge(HorizonError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RateLimited(HorizonError):
    """Back-pressure: a bounded queue is full or a key is over its rate."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class UpstreamError(HorizonError):
    """A model deployment answered with an error or broke the protocol."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"


class EngineRequestFailed(UpstreamError):
    """The engine answered this one request with a server error while the engine itself is up:
    vLLM reports a failure inside one request's generation (its ``GenerationError``, e.g. a
    JSON Schema its structured-output backend cannot compile: ``minProperties`` above the
    properties it allows) apart from the engine's death (``EngineDeadError``). Such a request
    fails on every replica, so it says nothing about the model's health: the breaker does not
    count it (a client could otherwise open a model's breaker for every caller with a handful
    of them), while the model's failure figures do, and the fallback chain still tries the
    next model (another engine may take it)."""


class ModelUnavailable(HorizonError):
    """No deployment can take the request now (down, breaker open, not ready, not served)."""

    status = 503
    type = "service_unavailable"
    code = "model_unavailable"


class DeploymentNotRunning(ModelUnavailable):
    """Serve's deployment states say the model has no running replica and is not getting one
    by waiting (a redeploy without surge, a crashed replica, a failed deploy). Nothing was
    called, so this says nothing new about the model's health: its breaker does not count it
    (otherwise the breaker would stay open after the replica is back), and trying the next
    model of a fallback chain does not use up the chain's depth."""


class UpstreamTimeout(HorizonError):
    status = 504
    type = "timeout_error"
    code = "timeout"
