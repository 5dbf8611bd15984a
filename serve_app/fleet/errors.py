"""Ray and engine failures, translated once into :mod:`serve_app.errors` types.

A handle call can fail in Ray (back-pressure, a dead or unschedulable replica) or come back
with the engine's own OpenAI error body; every fleet client maps both here, so the layers above
see only typed :class:`~serve_app.errors.HorizonError` s.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ..errors import ContextLengthExceeded, EngineRequestFailed, HorizonError, InvalidRequest, ModelUnavailable, \
    RateLimited, UpstreamError

_UNAVAILABLE = {"DeploymentUnavailableError", "ActorDiedError", "RayActorError",
                "ActorUnavailableError", "ActorUnschedulableError"}
# vLLM's exceptions for one request's failure in a working engine, raised through the replica
# (a complete answer; a stream carries them as an error body instead): GenerationError ("the
# request finished with an error", e.g. a grammar xgrammar cannot compile) and
# EngineGenerateError ("recoverable"). Not its subclass RetryableRequestError (a 503), nor
# EngineDeadError. By name, as Ray's above: the ingress does not import vLLM.
_ONE_REQUEST_FAILED = {"GenerationError", "EngineGenerateError"}
# vLLM's exception once the replica's engine core has died (killed for memory, a device
# error): every request to that replica fails until Serve's health check (every 10 s by
# default) finds it and starts another, so the model is unavailable for now, which its breaker
# counts. Its text is vLLM's "See stack trace (above)", twice over once pickled: not for clients.
_ENGINE_DEAD = "EngineDeadError"
_ENGINE_RESTART_RETRY_S = 10


def map_ray_error(alias: str, exc: BaseException) -> HorizonError:
    """Translate an exception raised by a handle call into a HorizonError."""
    if isinstance(exc, HorizonError):
        return exc
    name = type(exc).__name__
    if name == "BackPressureError":
        return RateLimited(f"model {alias!r} is at capacity (its queue is full); retry later",
                           retry_after=1)
    if name in _UNAVAILABLE:
        return ModelUnavailable(f"model {alias!r} is unavailable: {name}", retry_after=5)
    if name == _ENGINE_DEAD:
        return engine_dead(alias)
    if name in _ONE_REQUEST_FAILED:
        return EngineRequestFailed(f"model {alias!r} failed on this request: {str(exc).strip()[:300] or name}")
    cause = getattr(exc, "cause", None)
    if cause is not None and cause is not exc:
        return map_ray_error(alias, cause)
    if callable(getattr(exc, "code", None)) and callable(getattr(exc, "details", None)):
        # A gRPC error of the fast mode's calls between deployments: its text is a multi-line
        # repr whose last line is ">"; its status code and details say what happened.
        code = getattr(exc.code(), "name", exc.code())
        return UpstreamError(f"model {alias!r} failed: the call between deployments ended with "
                             f"{code}: {str(exc.details())[:300]}")
    text = str(exc).strip()
    first_line = text.splitlines()[-1] if text else name
    return UpstreamError(f"model {alias!r} failed: {first_line[:300]}")


# What vLLM's error body says once its engine core has died (vllm.v1.engine.exceptions.
# EngineDeadError): every request fails from then on, so that 500 counts against the breaker.
# Its other 500s are one request's failure (serve_app.errors.EngineRequestFailed).
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue"


def engine_dead(alias: str) -> ModelUnavailable:
    """The model's engine died (raised, or as the error body of a stream)."""
    return ModelUnavailable(f"model {alias!r} is unavailable: its engine stopped; Ray Serve is replacing "
                            "the replica", retry_after=_ENGINE_RESTART_RETRY_S)


# vLLM names the parameter inside its message: "... (parameter=logit_bias, value=...)".
_PARAMETER_IN_MESSAGE = re.compile(r"\(parameter=([A-Za-z_][\w.\[\]]*)")


def _param_of(inner: dict[str, Any], message: str) -> Optional[str]:
    """The parameter an engine's 400 names: its ``param`` field, else the one in its message."""
    param = inner.get("param")
    if isinstance(param, str) and param:
        return param
    found = _PARAMETER_IN_MESSAGE.search(message)
    return found.group(1) if found else None


def engine_error(alias: str, error: Any) -> HorizonError:
    """An engine's OpenAI error body (vLLM returns it instead of raising) as a HorizonError."""
    payload = error.model_dump() if hasattr(error, "model_dump") else dict(error)
    inner = payload.get("error", payload)
    message = inner.get("message") or str(inner)
    code = inner.get("code")
    status = int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit()) else 500
    if status == 400:
        lowered = message.lower()
        if "maximum context length" in lowered or "max_model_len" in lowered or "context length" in lowered:
            return ContextLengthExceeded(f"model {alias!r}: {message}", param="messages")
        return InvalidRequest(f"model {alias!r} rejected the request: {message}", param=_param_of(inner, message))
    if status == 500:
        if ENGINE_DEAD_MESSAGE in message:
            return engine_dead(alias)
        return EngineRequestFailed(f"model {alias!r} failed on this request: {message}")
    return UpstreamError(f"model {alias!r} failed: {message}")
