"""The panel round: members answer concurrently under ``max_concurrent`` and a round deadline.

Each member gets the full history as text, its ``analysis_overrides`` sampling and never the
client's tools. ``round_timeout_seconds`` cancels the asyncio tasks of stragglers (the
handle-based client turns that cancellation into an engine abort) and keeps finished answers.
``on_error: fail`` stops the round at the first failed or unusable answer. The quorum is then
checked by :func:`check_quorum` before any judge call.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from ..fleet.protocol import Fleet
from ..errors import HorizonError, InvalidRequest, ModelUnavailable, RateLimited
from .errors import FusionPanelError
from ..messages.view import first_message
from .messages import answer_text, is_usable, reasoning_of, sub_request, \
    text_only_history
from .policy import FusionPolicy

MemberStatus = Literal["ok", "error", "timeout", "empty", "cancelled", "pending"]


@dataclass
class MemberResult:
    """One panel member's attempt."""

    index: int
    model: str
    status: MemberStatus = "pending"
    started: bool = False
    response: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    latency_ms: Optional[float] = None   # the call itself, as the looper sees it
    queued_ms: Optional[float] = None    # waiting for a max_concurrent slot
    request: Optional[dict[str, Any]] = None
    exception: Optional[Exception] = field(default=None, repr=False)

    @property
    def usable(self) -> bool:
        return self.status == "ok"

    @property
    def text(self) -> str:
        return answer_text(self.response) if self.response else ""

    @property
    def usage(self) -> Optional[dict[str, Any]]:
        return (self.response or {}).get("usage")

    def failure(self) -> dict[str, Any]:
        return {"model": self.model, "index": self.index, "status": self.status,
                "error": self.error, "error_type": self.error_type}

    def attempt(self) -> dict[str, Any]:
        """Per-attempt facts without answer content (safe for error bodies)."""
        return {"model": self.model, "index": self.index, "status": self.status,
                "started": self.started, "error": self.error, "error_type": self.error_type,
                "latency_ms": self.latency_ms, "usage": self.usage}

    def trace(self) -> dict[str, Any]:
        message = first_message(self.response) if self.response else {}
        entry: dict[str, Any] = {
            "model": self.model, "index": self.index, "status": self.status,
            "content": message.get("content") if self.response else None,
            "latency_ms": self.latency_ms, "queued_ms": self.queued_ms, "usage": self.usage,
        }
        reasoning = reasoning_of(message)
        if reasoning:
            entry["reasoning_content"] = reasoning
        if self.error:
            entry["error"] = self.error
        return entry


@dataclass
class PanelRound:
    members: list[MemberResult]
    elapsed_ms: float
    timed_out: bool = False
    # The member whose failure stopped the round under on_error: fail.
    stopped_by: Optional[MemberResult] = None
    usable: list[MemberResult] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return sum(1 for m in self.members if m.started)

    @property
    def failed(self) -> list[MemberResult]:
        return [m for m in self.members if m.status != "ok"]


def member_request(request: dict[str, Any], history: list[dict[str, Any]], model: str,
                   policy: FusionPolicy) -> dict[str, Any]:
    """Sampling precedence: the member's override, then the policy, then the client request."""
    override = policy.params.override_for(model)
    temperature = override.temperature if override and override.temperature is not None \
        else policy.temperature
    max_tokens = override.max_completion_tokens if override and override.max_completion_tokens \
        else policy.max_completion_tokens
    return sub_request(request, history, temperature=temperature,
                       max_completion_tokens=max_tokens, final=False)


async def _call_member(fleet: Fleet, member: MemberResult, slots: asyncio.Semaphore,
                       stop: Optional[asyncio.Event]) -> MemberResult:
    """One member's call. ``stop`` (on_error: fail) is set by the first failure *before* its
    slot is released, so members still queued for a slot never start."""
    queued_at = time.perf_counter()
    async with slots:
        if stop is not None and stop.is_set():
            return member
        member.started = True
        started_at = time.perf_counter()
        member.queued_ms = (started_at - queued_at) * 1000
        try:
            response = await fleet.client(member.model).complete(member.request)
        except asyncio.CancelledError:
            member.latency_ms = (time.perf_counter() - started_at) * 1000
            raise
        except Exception as exc:  # any member failure is data for the failure policy
            member.status, member.error = "error", str(exc) or type(exc).__name__
            member.error_type, member.exception = type(exc).__name__, exc
        else:
            member.response = response
            if is_usable(response):
                member.status = "ok"
            else:
                member.status = "empty"
                member.error = "empty answer: no content or reasoning after trimming"
        member.latency_ms = (time.perf_counter() - started_at) * 1000
        if stop is not None and member.status != "ok":
            stop.set()
        return member


async def run_panel(fleet: Fleet, policy: FusionPolicy, request: dict[str, Any]) -> PanelRound:
    history = text_only_history(list(request.get("messages") or []))
    members = [MemberResult(index=i, model=m) for i, m in enumerate(policy.panel)]
    for member in members:
        member.request = member_request(request, history, member.model, policy)
    slots = asyncio.Semaphore(policy.max_concurrent)
    stop = asyncio.Event() if policy.on_error == "fail" else None
    started_at = time.perf_counter()
    tasks = {asyncio.create_task(_call_member(fleet, m, slots, stop)): m for m in members}
    pending = set(tasks)
    deadline = None if policy.round_timeout_seconds is None \
        else started_at + policy.round_timeout_seconds
    round_ = PanelRound(members=members, elapsed_ms=0.0)
    try:
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
            done, pending = await asyncio.wait(pending, timeout=remaining,
                                               return_when=asyncio.FIRST_COMPLETED)
            if not done:
                round_.timed_out = True
                break
            if policy.on_error == "fail":
                failed = [tasks[t] for t in done if tasks[t].status not in ("ok", "pending")]
                if failed:
                    round_.stopped_by = min(failed, key=lambda m: m.index)
                    break
    finally:
        # Stragglers (deadline), the rest of the round (on_error: fail) or everything (our own
        # caller was cancelled): cancel and wait so no engine keeps generating for nobody.
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    for member in members:
        if member.status == "pending":
            if round_.timed_out:
                member.status = "timeout"
                member.error = (f"round_timeout_seconds={policy.round_timeout_seconds:g} elapsed "
                                + ("before it answered" if member.started else "before it started"))
            else:
                member.status = "cancelled"
                culprit = round_.stopped_by.model if round_.stopped_by else "another member"
                member.error = f"cancelled: on_error=fail after {culprit} failed"
            member.error_type = member.status
    round_.elapsed_ms = (time.perf_counter() - started_at) * 1000
    round_.usable = [m for m in members if m.usable]
    return round_


# Failures that say something about the request or the load rather than a broken model: when
# every failed member failed the same one of these ways, the client gets that status (with the
# panel's facts) instead of the 502 below.
_PASSED_ON = (InvalidRequest, RateLimited, ModelUnavailable)


def _shared_failure(round_: PanelRound) -> Optional[HorizonError]:
    """The error to answer with when every failed member failed in one way the client can act on.

    * 400: each member's engine refused the request itself (``max_completion_tokens`` past its
      window, a bad ``logit_bias``); a retry would be refused again.
    * 429: each member's admission line was full: the client should back off for Retry-After
      (the longest any member gave), as it would for a single model.
    * 503: no member could be reached (breaker open, deployment down), as a static request whose
      fallback chain is exhausted.

    A mix of these, or a timeout, an engine failure or an empty answer among them, is the 502.
    """
    # A timeout or an empty answer has no exception (None): it never matches a kind below.
    errors = [m.exception for m in round_.failed if m.status != "cancelled"]
    if not errors:
        return None
    for kind in _PASSED_ON:
        if all(isinstance(e, kind) for e in errors):
            # The first member's error, with the longest wait any of them asked for.
            chosen: HorizonError = errors[0]  # type: ignore[assignment]
            waits = [e.retry_after for e in errors if e.retry_after is not None]  # type: ignore[union-attr]
            if waits:
                chosen.retry_after = max(waits)
            return chosen
    return None


def check_quorum(round_: PanelRound, policy: FusionPolicy) -> None:
    """Raise FusionPanelError unless the panel may go on to the judge; the members' own 400, 429
    or 503 when that is how every failed member failed (:func:`_shared_failure`)."""
    attempts = [m.attempt() for m in round_.members]
    common = dict(required=policy.min_successful_responses, usable=len(round_.usable),
                  on_error=policy.on_error, attempts=attempts, decision=policy.decision)
    enough = len(round_.usable) >= policy.min_successful_responses
    if round_.failed and (policy.on_error == "fail" or not enough):
        shared = _shared_failure(round_)
        if shared is not None:
            shared.details.setdefault("fusion", FusionPanelError.trace(**common))
            raise shared
    if policy.on_error == "fail" and round_.failed:
        first = round_.stopped_by or round_.failed[0]
        raise FusionPanelError(
            f"Fusion panel member {first.model!r} failed ({first.status}: {first.error}) and "
            f"on_error is 'fail'", **common)
    if len(round_.usable) < policy.min_successful_responses:
        summary = ", ".join(f"{m.model}: {m.status}" for m in round_.failed) or "none"
        raise FusionPanelError(
            f"Fusion panel quorum not met: {len(round_.usable)} usable response(s), "
            f"{policy.min_successful_responses} required (failures: {summary})", **common)
