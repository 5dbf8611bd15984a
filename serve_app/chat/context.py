"""One chat request as the pipeline carries it, and what comes back.

:class:`ChatCall` is what the HTTP layer hands over (the validated body, without HTTP);
:class:`RequestContext` accumulates what each step decides (target, routing result, decision,
task type, session, response headers) so the static and Fusion strategies take one object
instead of a dozen arguments; :class:`ChatOutcome` is the answer or its chunk stream.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Literal, Optional

from ..config.routing import Decision
from ..routing.router import RoutingResult

# (model alias or None, decision name or None, fusion?, the parameter naming a request-supplied
# Fusion panel or None) → raises PermissionDenied when not allowed.
Authorizer = Callable[[Optional[str], Optional[str], bool, Optional[str]], None]

TargetKind = Literal["model", "auto", "fusion"]


@dataclass(frozen=True)
class ChatCall:
    """A validated chat request: the requested ``model``, the engine body, streaming flags."""

    model: str
    # Everything a model receives: messages, sampling, tools, response_format, ...
    body: dict[str, Any]
    stream: bool = False
    include_usage: bool = False
    plugins: Optional[list[dict[str, Any]]] = None
    # Responses' ``truncation: "auto"``: a conversation too long for the model loses its oldest
    # turns instead of being refused.
    drop_oldest_to_fit: bool = False


@dataclass(frozen=True)
class Target:
    """Where a request goes: a fleet alias directly, or through routing."""

    kind: TargetKind
    name: str


@dataclass
class RequestContext:
    """What the pipeline knows about one request so far."""

    call: ChatCall
    target: Target
    # The body as the steps change it (images checked, output contract, sampling, history).
    body: dict[str, Any]
    debug: bool = False
    fallback_ok: bool = True
    session_id: Optional[str] = None
    authorize: Optional[Authorizer] = None
    routing: Optional[RoutingResult] = None
    decision: Optional[Decision] = None
    # The model the decision (or the request) names; None when Fusion decides.
    alias: Optional[str] = None
    task_type: str = "unknown"
    # x-vsr-* response headers gathered on the way (kept on errors too).
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def decision_name(self) -> str:
        return self.decision.name if self.decision is not None else "direct"

    @property
    def uses_fusion(self) -> bool:
        return self.target.kind == "fusion" or (
            self.decision is not None and self.decision.algorithm.type == "fusion")


@dataclass
class ChatOutcome:
    response: Optional[dict[str, Any]] = None
    chunks: Optional[AsyncIterator[dict[str, Any]]] = None
    headers: dict[str, str] = field(default_factory=dict)
    # Facts for metrics and logs (decision, model, task type).
    decision: str = "direct"
    model: str = ""
    task_type: str = "unknown"


def refusal_response(model: str, text: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-refusal-{uuid.uuid4().hex[:16]}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
