"""Text completions (``POST /v1/completions``): a prompt in, its continuation out.

The same path as a static chat answer, minus what only a conversation has: resolve ``model``
(fleet alias or auto slug; a Fusion slug is a 400, Fusion synthesises chat answers), route on
the prompt's text among the decisions that are not Fusion, authorise, answer a refusal without
a model, fit the context (a longer-context model of the chain, else a 400 naming ``prompt``),
then the model call through resilience (admission, breaker, deadlines, fallback chain) as a
text completion. Sessions, output contracts and tools are chat concepts and do not apply;
other OpenAI and vLLM fields (``n``, ``logprobs``, ``echo``, ``stop``, ``response_format`` ...)
pass through to the engine.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, Union

from ..config.schema import HorizonConfig
from ..errors import ContextLengthExceeded, HorizonError, InvalidRequest
from ..messages.chunks import Chunk
from ..messages.view import estimate_text_tokens
from ..observability.metrics import record_routing
from ..resilience.fallback import ResilientFleet
from ..routing.router import RoutingResult
from ..routing.sampling import apply_sampling_matrix
from .context import Authorizer, ChatOutcome
from .context_length import route_for_context
from .static import fallback_headers
from .targets import Targets
from .tools import check_n

Prompt = Union[str, list[str], list[int], list[list[int]]]


@dataclass(frozen=True)
class CompletionCall:
    """A validated text-completion request: ``model``, the engine body (with ``prompt``)."""

    model: str
    body: dict[str, Any]
    stream: bool = False
    include_usage: bool = False


def prompt_text(prompt: Prompt) -> Optional[str]:
    """The prompt as text for routing (a batch's prompts joined); None for token ids."""
    if isinstance(prompt, str):
        return prompt
    if all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)  # type: ignore[arg-type]
    return None


def longest_prompt(prompt: Prompt) -> Optional[str]:
    """The text the model's context must hold: each prompt of a batch is a sequence of its own,
    so the longest one, never the batch joined (ten 340-token prompts fit a 2,048-token
    window); None for token ids, which the engine measures itself."""
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(p, str) for p in prompt):
        return max(prompt, key=estimate_text_tokens)  # type: ignore[arg-type]
    return None


def refusal_completion(model: str, text: str, choices: int) -> dict[str, Any]:
    return {"id": f"cmpl-refusal-{uuid.uuid4().hex[:16]}", "object": "text_completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": "stop"}
                        for i in range(choices)],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


class CompletionService:
    def __init__(self, cfg: HorizonConfig, fleet: ResilientFleet, targets: Targets,
                 route_text: Callable[[str], Awaitable[RoutingResult]]):
        self.cfg = cfg
        self.fleet = fleet
        self.targets = targets
        # The chat service's routing of a text (its router is installed once routing starts).
        self._route_text = route_text

    async def complete(self, call: CompletionCall, *, debug: bool = False,
                       authorize: Optional[Authorizer] = None, fallback_ok: bool = True) -> ChatOutcome:
        target = self.targets.resolve(call.model)
        if target.kind == "fusion":
            raise InvalidRequest(f"{call.model!r} is a Fusion model, which answers chat completions "
                                 "only; use /v1/chat/completions, an auto model or a fleet model",
                                 param="model")
        check_n(self.cfg, call.body)
        text = prompt_text(call.body["prompt"])
        headers: dict[str, str] = {}
        decision = routing = None
        if target.kind == "model":
            alias, task_type = target.name, self.targets.task_type_of(target.name)
        else:
            if text is None:
                raise InvalidRequest("routing reads the prompt's text: send prompt as a string or a "
                                     "list of strings, or name a fleet model for token ids", param="prompt")
            routing = await self._route_text(text)
            record_routing(routing.decision.name, routing.routing_ms / 1000)
            decision, alias, task_type = routing.decision, routing.model, routing.task_type
            headers = routing.headers(debug)
        try:
            return await self._run(call, alias, task_type, decision, headers, authorize,
                                   fallback_ok, routing)
        except HorizonError as exc:
            exc.extra_headers = {**headers, **exc.extra_headers}
            raise

    async def _run(self, call: CompletionCall, alias: str, task_type: str, decision: Any,
                   headers: dict[str, str], authorize: Optional[Authorizer],
                   fallback_ok: bool, routing: Any) -> ChatOutcome:
        name = decision.name if decision is not None else "direct"
        if authorize is not None:
            authorize(alias, None if decision is None else decision.name, False)
        if decision is not None and decision.refusal:
            headers["x-vsr-selected-model"] = "none"
            choices = int(call.body.get("n") or 1) * max(1, len(call.body["prompt"])
                                                         if isinstance(call.body["prompt"], list) else 1)
            refusal = refusal_completion(call.model, decision.refusal, choices)
            # A client that asked for a stream reads SSE, also when no model answers.
            return ChatOutcome(response=None if call.stream else refusal,
                               chunks=_replay(refusal) if call.stream else None,
                               headers=headers, decision=name, model="none", task_type=task_type)
        self.targets.check_chat_model(alias, [])
        body = dict(call.body)
        if routing is not None:
            body = apply_sampling_matrix(body, routing.sampling_key, self.cfg)
        longest = longest_prompt(call.body["prompt"])
        if longest is not None:
            alias = self._fit_context(task_type, alias, body, longest, headers)
        headers["x-vsr-selected-model"] = alias
        headers.setdefault("x-vsr-task-type", task_type)
        outcome = ChatOutcome(headers=headers, decision=name, model=alias, task_type=task_type)
        if call.stream:
            run = self.fleet.stream(task_type, alias, body, fallback_ok=fallback_ok, text=True)
            first = await run.__anext__()  # errors before any content stay plain HTTP errors
            fallback_headers(headers, run.hops, task_type)
            if run.model:
                headers["x-vsr-selected-model"] = outcome.model = run.model
            outcome.chunks = _chain(first, run)
            return outcome
        response, hops = await self.fleet.complete(task_type, alias, body, fallback_ok=fallback_ok, text=True)
        fallback_headers(headers, hops, task_type)
        served = next((h.model for h in reversed(hops) if h.outcome == "ok"), alias)
        headers["x-vsr-selected-model"] = outcome.model = served
        outcome.response = response
        return outcome

    def _fit_context(self, task_type: str, alias: str, body: dict[str, Any], text: str,
                     headers: dict[str, str]) -> str:
        view = {**body, "messages": [{"role": "user", "content": text}]}
        try:
            placed = route_for_context(self.cfg, task_type, alias, view)
        except ContextLengthExceeded as exc:
            exc.message = exc.message.replace("in the messages", "in the prompt").replace(
                "Shorten the messages", "Shorten the prompt")
            exc.args = (exc.message,)
            if exc.param == "messages":
                exc.param = "prompt"
            raise
        if placed.rerouted:
            headers["x-vsr-context-reroute"] = f"{alias}->{placed.model}"
        return placed.model


async def _replay(response: dict[str, Any]):
    """A finished text completion as stream chunks: one per choice, then the usage chunk."""
    base = {k: response[k] for k in ("id", "object", "created", "model")}
    for choice in response["choices"]:
        yield Chunk({**base, "choices": [choice]})
    yield Chunk({**base, "choices": [], "usage": response["usage"]})


async def _chain(first: Any, rest: Any):
    yield first
    async for chunk in rest:
        yield chunk
