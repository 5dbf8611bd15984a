"""Context length: catch a prompt that cannot fit the target model before any engine sees it.

An over-long prompt must end as a clean 400 ``context_length_exceeded`` (or, where the profile
allows it, move to a model of the task type's fallback chain with a longer context), never as
an engine crash or a 500. The prompt size is the project's one token estimator
(:func:`serve_app.sessions.context.estimate_tokens`), which errs high on purpose: refusing a
request a few tokens early is cheap, an engine failing on it is not. The engine's own exact
check still stands behind this one (``serve_app.fleet.errors`` maps it to the same error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..config.schema import HorizonConfig
from ..errors import ContextLengthExceeded
from ..messages.view import estimate_tokens
from ..sessions.context import trim_to_context

Message = dict[str, Any]

# A completion needs room for at least one token even when the request sets no limit
# (an engine then generates until the context is full).
_MIN_COMPLETION_TOKENS = 1


def estimate_prompt_tokens(messages: Sequence[Message]) -> int:
    """Estimated prompt tokens of chat messages (the shared, deliberately high estimate)."""
    return estimate_tokens(messages)


def client_limit_field(request: dict[str, Any]) -> Optional[str]:
    """The field that carries the client's completion limit (``max_completion_tokens`` wins
    over ``max_tokens``, as in OpenAI's API), or None when the request sets neither."""
    return next((f for f in ("max_completion_tokens", "max_tokens") if request.get(f)), None)


def requested_completion_tokens(cfg: HorizonConfig, alias: str, request: dict[str, Any]) -> int:
    """Room the answer needs: the request's limit, else the model's configured default."""
    field = client_limit_field(request)
    limit = request[field] if field else cfg.model(alias).sampling.max_tokens
    return int(limit) if limit else _MIN_COMPLETION_TOKENS


@dataclass(frozen=True)
class ContextNeed:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _exceeded(alias: str, limit: int, need: ContextNeed, param: str) -> ContextLengthExceeded:
    return ContextLengthExceeded(
        f"model {alias!r} has a maximum context length of {limit} tokens, but this request needs "
        f"about {need.total} ({need.prompt_tokens} in the messages, {need.completion_tokens} for "
        "the completion). Shorten the messages or lower max_tokens.",
        param=param,
        details={"model": alias, "max_model_len": limit, "prompt_tokens": need.prompt_tokens,
                 "completion_tokens": need.completion_tokens})


def check_context(cfg: HorizonConfig, alias: str, request: dict[str, Any],
                  prompt_tokens: Optional[int] = None) -> None:
    """Raise ContextLengthExceeded (400, ``context_length_exceeded``, param ``messages``, or the
    client's ``max_tokens`` / ``max_completion_tokens`` when the prompt alone fits) when
    the prompt plus the completion limit exceed the model's context. ``prompt_tokens``: the
    estimate when the caller already has it (it walks every message)."""
    limit = cfg.context_limit(alias)
    if prompt_tokens is None:
        prompt_tokens = estimate_prompt_tokens(request.get("messages") or [])
    need = ContextNeed(prompt_tokens, requested_completion_tokens(cfg, alias, request))
    if need.total > limit:
        # The client's own completion limit is what does not fit when the prompt alone would
        # (as OpenAI names max_tokens then); otherwise the messages are.
        limit_field = client_limit_field(request)
        param = limit_field if limit_field and prompt_tokens < limit else "messages"
        raise _exceeded(alias, limit, need, param)


def _chain_candidates(cfg: HorizonConfig, task_type: Optional[str], alias: str) -> list[str]:
    """Served chat models of the task type's fallback chain other than ``alias``, in order."""
    if not cfg.resilience.context_fallback or task_type is None:
        return []
    served = set(cfg.aliases)
    # unavailable_models may sit in a chain; they serve nothing.
    return [c for c in cfg.resilience.fallback_chains.get(task_type, [])
            if c != alias and c in served and cfg.model(c).role != "embedding"]


def longer_context_alternative(cfg: HorizonConfig, task_type: Optional[str], alias: str,
                               needed_tokens: int) -> Optional[str]:
    """The first model of the task type's fallback chain, other than ``alias``, whose context
    holds ``needed_tokens``; None when the profile turns this off
    (``resilience.context_fallback``), the chain has none, or the task type has no chain."""
    for candidate in _chain_candidates(cfg, task_type, alias):
        if cfg.context_limit(candidate) >= needed_tokens:
            return candidate
    return None


@dataclass(frozen=True)
class ContextRoute:
    """Where a request goes after the context check."""

    model: str
    requested: str
    prompt_tokens: int

    @property
    def rerouted(self) -> bool:
        return self.model != self.requested


def route_for_context(cfg: HorizonConfig, task_type: Optional[str], alias: str,
                      request: dict[str, Any]) -> ContextRoute:
    """``alias`` when the request fits it, else the first model of the task type's chain that
    it fits (each judged with its own completion default), else ContextLengthExceeded naming
    ``alias``'s limit. The one call the serving path makes before a model call."""
    prompt_tokens = estimate_prompt_tokens(request.get("messages") or [])
    try:
        check_context(cfg, alias, request, prompt_tokens)
        return ContextRoute(alias, alias, prompt_tokens)
    except ContextLengthExceeded:
        for candidate in _chain_candidates(cfg, task_type, alias):
            try:
                check_context(cfg, candidate, request, prompt_tokens)
            except ContextLengthExceeded:
                continue
            return ContextRoute(candidate, alias, prompt_tokens)
        raise


# Response header: how many of the request's messages were left out to fit the context.
DROPPED_HEADER = "x-vsr-context-dropped-messages"


def fitted_request(cfg: HorizonConfig, models: Sequence[str], request: dict[str, Any],
                   headers: dict[str, str], refusal: Optional[ContextLengthExceeded] = None
                   ) -> dict[str, Any]:
    """The request with its oldest turns dropped until it fits every one of ``models`` (each
    with room for its completion), as sessions trim their history: whole turns from the start,
    the system prompt and the latest turn always kept (Responses' ``truncation: "auto"``).
    Unchanged when it fits; otherwise ``headers`` gets how many messages went. When the system
    prompt and the latest turn alone do not fit: ``refusal`` (the error the request had
    without dropping anything), else a 400 ``context_length_exceeded`` saying so."""
    budget = min(cfg.context_limit(m) - requested_completion_tokens(cfg, m, request) for m in models)
    messages = request.get("messages") or []
    try:
        kept = trim_to_context(messages, max(0, budget))
    except ContextLengthExceeded:
        if refusal is not None:
            raise refusal from None
        raise
    if len(kept) == len(messages):
        return request
    headers[DROPPED_HEADER] = str(len(messages) - len(kept))
    return {**request, "messages": kept}
