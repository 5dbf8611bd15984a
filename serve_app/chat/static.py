"""The static strategy: one model answers, through resilience.

In order: the output contract (a bad ``response_format`` is a 400 before any model runs), the
decision's ``output_contract`` text, sampling (the routing matrix, then the model's defaults),
the session's history for the task type, a longer-context model when the prompt does not fit,
then the call through the fallback chain (stream or not), the JSON enforcement of a
``response_format``, and the session turn.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Optional

from ..config.schema import HorizonConfig
from ..errors import ContextLengthExceeded
from ..fleet.backends import backend
from ..messages.chunks import Chunk, response_to_chunks
from ..observability.metrics import record_fallback
from ..outputs.structured import (apply_output_contract, contract_from_request, enforce_detailed,
                                  prepare_request)
from ..resilience.fallback import ResilientFleet, fallback_header
from ..routing.sampling import apply_sampling_matrix
from ..sessions.context import history_budget
from ..sessions.store import SessionStore
from ..sessions.turns import answer_message, prepare_turn, record_turn
from .context import ChatOutcome, RequestContext
from .context_length import fitted_request, route_for_context
from .targets import Targets
from .tools import check_model_takes_tools, fit_to_model, uses_tools


class StaticStrategy:
    def __init__(self, cfg: HorizonConfig, fleet: ResilientFleet, targets: Targets,
                 sessions: Optional[SessionStore] = None):
        self.cfg = cfg
        self.fleet = fleet
        self.targets = targets
        self.sessions = sessions

    async def run(self, ctx: RequestContext) -> ChatOutcome:
        assert ctx.alias is not None
        self.targets.check_chat_model(ctx.alias, ctx.body["messages"])
        headers, task_type = ctx.headers, ctx.task_type
        contract = contract_from_request(ctx.body)  # a bad response_format is a 400 before any model runs
        body = ctx.body
        if ctx.decision is not None and ctx.decision.output_contract:
            body = {**body, "messages": apply_output_contract(body["messages"], ctx.decision.output_contract)}
        body = self._sampling(body, ctx)
        turn = await self._prepare_session(ctx, body)
        if turn is not None:
            body = {**body, "messages": turn.messages}
        alias = ctx.alias
        # Too long for the model: a configured longer-context model in the chain, else the
        # oldest turns dropped when the client allows it, else a clean 400.
        try:
            placed = route_for_context(self.cfg, task_type, alias, body)
        except ContextLengthExceeded as refusal:
            if not ctx.call.drop_oldest_to_fit:
                raise
            body = fitted_request(self.cfg, [alias], body, headers, refusal)
        else:
            if placed.rerouted:
                headers["x-vsr-context-reroute"] = f"{alias}->{placed.model}"
                alias = placed.model
        # A request with tools only goes to an engine with tool calling (400 naming it).
        check_model_takes_tools(self.cfg, alias, body)
        body = fit_to_model(self.cfg, alias, body)
        constrained = backend(self.cfg.engine_owner(alias).backend).constrains_decoding
        body = prepare_request(contract, body, engine_constrained=constrained)
        needs_tools = uses_tools(body)
        headers["x-vsr-selected-model"] = alias
        headers.setdefault("x-vsr-task-type", task_type)
        outcome = ChatOutcome(headers=headers, decision=ctx.decision_name, model=alias, task_type=task_type)

        if ctx.call.stream and contract is None:
            run = self.fleet.stream(task_type, alias, body, fallback_ok=ctx.fallback_ok,
                                    needs_tools=needs_tools)
            first = await run.__anext__()  # errors before any content stay plain HTTP errors
            fallback_headers(headers, run.hops, task_type)
            if run.model:
                headers["x-vsr-selected-model"] = outcome.model = run.model
            outcome.chunks = self._recording_stream(first, run, turn)
            return outcome

        response, hops = await self.fleet.complete(task_type, alias, body, fallback_ok=ctx.fallback_ok,
                                                   needs_tools=needs_tools)
        fallback_headers(headers, hops, task_type)
        served = next((h.model for h in reversed(hops) if h.outcome == "ok"), alias)
        headers["x-vsr-selected-model"] = outcome.model = served
        if contract is not None:
            async def retry(corrective: dict[str, Any]) -> dict[str, Any]:
                answer, _ = await self.fleet.complete(task_type, served, corrective, fallback_ok=False)
                return answer

            enforced = await enforce_detailed(contract, response, retry, engine_constrained=constrained,
                                              request=body)
            response = enforced.response
            # How the JSON was obtained (valid / repaired / retried / tool_calls / truncated):
            # operators see whether a model needs the repair path, clients whether a retry cost
            # them tokens or the answer was cut at their token limit.
            headers["x-vsr-structured-output"] = enforced.status
        if turn is not None:
            await record_turn(self.sessions, turn, answer_message(response))
        if ctx.call.stream:
            # A JSON answer had to be complete to be checked; it is replayed as a stream.
            outcome.chunks = replay(response)
        else:
            outcome.response = response
        return outcome

    # ------------------------------------------------------------------ pieces
    def _sampling(self, body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        """Temperature when the client set none: the routing matrix, else the model default."""
        if ctx.routing is not None:
            body = apply_sampling_matrix(body, ctx.routing.sampling_key, self.cfg)
        defaults = self.cfg.model(ctx.alias).sampling
        for key in ("temperature", "top_p", "max_tokens"):
            value = getattr(defaults, key)
            if value is not None and body.get(key) is None and not (key == "max_tokens" and body.get("max_completion_tokens")):
                body = {**body, key: value}
        return body

    async def _prepare_session(self, ctx: RequestContext, body: dict[str, Any]):
        if self.sessions is None or ctx.session_id is None:
            return None
        budget = history_budget(self.cfg.model(ctx.alias).engine.max_model_len,
                                body.get("max_completion_tokens") or body.get("max_tokens"),
                                self.cfg.sessions.output_reserve_tokens)
        return await prepare_turn(self.sessions, ctx.session_id, ctx.task_type, body["messages"],
                                  prompt_budget=budget)


    async def _recording_stream(self, first: Chunk, rest: AsyncIterator[Chunk],
                                turn: Any) -> AsyncIterator[Chunk]:
        """Pass chunks through; when a session is named, store the streamed answer at the end
        (only then is each chunk's content read)."""
        if turn is None:
            yield first
            async for chunk in rest:
                yield chunk
            return
        text: list[str] = []
        failed = False

        async def all_chunks() -> AsyncIterator[Chunk]:
            yield first
            async for chunk in rest:
                yield chunk

        async for chunk in all_chunks():
            if chunk.is_error:
                failed = True
            for choice in chunk.data.get("choices") or []:
                # With n > 1 the session keeps the first choice, as for a complete answer.
                if choice.get("index", 0) == 0:
                    text.append((choice.get("delta") or {}).get("content") or "")
            yield chunk
        if turn is not None and not failed:
            await record_turn(self.sessions, turn, {"role": "assistant", "content": "".join(text)})


def fallback_headers(headers: dict[str, str], hops: list[Any], task_type: str = "unknown") -> None:
    """``x-vsr-fallback`` for the hops a request took, and a fallback metric per hop taken."""
    value = fallback_header(hops)
    if value:
        headers["x-vsr-fallback"] = value
    for hop, nxt in zip(hops, hops[1:]):
        if hop.outcome != "ok":
            record_fallback(task_type, hop.model, nxt.model)


async def replay(response: dict[str, Any]) -> AsyncIterator[Chunk]:
    """A finished answer as stream chunks (Fusion and checked JSON answers stream after all stages)."""
    for chunk in response_to_chunks(response, include_usage=True):
        yield Chunk(chunk)
