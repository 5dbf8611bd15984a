"""The Fusion strategy: resolve the policy, run the looper, enforce JSON, report the trace.

The looper (``serve_app.fusion``) runs panel → judge → synthesis with every sub-call guarded;
this module turns a request into its policy and the looper's outcome into the client's answer
(``x-vsr-fusion-*`` headers, a replayed stream when the client streams, stage metrics).

A request naming a session (``X-Session-ID``) gets its task type's history like a static
request: merged into the messages every panel member and the judge see, trimmed to the
smallest context among them, and the synthesised answer stored as the turn's reply.
"""

from __future__ import annotations

from typing import Optional

from ..config.schema import HorizonConfig
from ..errors import InvalidRequest, ModelUnavailable
from ..fleet.backends import backend
from ..fusion.looper import FusionLooper
from ..fusion.policy import FusionPolicy, find_fusion_plugin, resolve_policy
from ..observability.metrics import record_fusion_stage
from ..outputs.structured import contract_from_request, enforce_detailed, prepare_request
from ..sessions.context import history_budget
from ..sessions.store import SessionStore
from ..sessions.turns import PreparedTurn, answer_message, prepare_turn, record_turn
from .context import ChatOutcome, RequestContext
from .context_length import fitted_request
from .static import replay
from .tools import check_model_takes_tools


class FusionStrategy:
    def __init__(self, cfg: HorizonConfig, looper: FusionLooper | None,
                 sessions: Optional[SessionStore] = None):
        self.cfg = cfg
        self.looper = looper
        self.sessions = sessions

    async def run(self, ctx: RequestContext) -> ChatOutcome:
        if self.looper is None:
            raise ModelUnavailable("Fusion is not available in this deployment")
        call, headers = ctx.call, ctx.headers
        if (ctx.body.get("n") or 1) > 1:
            raise InvalidRequest("Fusion answers with one synthesis of its panel: n must be 1 (ask "
                                 "a fleet model or an auto decision for several choices)", param="n")
        full = {**ctx.body, "model": call.model}
        if call.plugins is not None:
            full["plugins"] = call.plugins
        policy = resolve_policy(self.cfg, ctx.decision, find_fusion_plugin(full), full)
        # Only the judge's synthesis gets the tools: a judge without tool calling fails here,
        # before the panel is spent.
        if policy.judge in self.cfg.aliases:
            check_model_takes_tools(self.cfg, policy.judge, ctx.body, role="the Fusion judge")
        contract = contract_from_request(ctx.body)
        body = ctx.body
        turn = await self._prepare_session(ctx, policy)
        if turn is not None:
            body = {**body, "messages": turn.messages}
        readers = self._readers(policy)
        if call.drop_oldest_to_fit and readers:
            body = fitted_request(self.cfg, readers, body, headers)
        constrained = self._judge_constrains_decoding(policy)
        looped = prepare_request(contract, body, engine_constrained=False)
        if contract is not None and constrained:
            # Every sub-call reads the requirement (written into the conversation above); the
            # judge's final call also decodes under the engine's grammar, the only call that
            # keeps response_format (panel and analysis answers stay free text). Without it a
            # small judge rambles past the JSON.
            looped["response_format"] = body["response_format"]
        result = await self.looper.run(looped, policy)
        for stage, ms in (result.trace.get("timings_ms") or {}).items():
            if stage != "total":
                record_fusion_stage(policy.decision, stage, ms / 1000)
        if contract is not None:
            # Checked as on the static path: strictly after a grammar, else extracted and
            # repaired. No corrective retry: it would be a second synthesis of the whole panel.
            enforced = await enforce_detailed(contract, result.response, None,
                                              engine_constrained=constrained)
            result.response = enforced.response
            headers["x-vsr-structured-output"] = enforced.status
        if turn is not None:
            await record_turn(self.sessions, turn, answer_message(result.response))
        headers.update(result.headers())
        headers["x-vsr-selected-model"] = call.model
        headers.setdefault("x-vsr-task-type", ctx.task_type)
        outcome = ChatOutcome(headers=headers, decision=policy.decision, model=call.model,
                              task_type=ctx.task_type)
        if call.stream:
            outcome.chunks = replay(result.response)
        else:
            outcome.response = result.response
        return outcome

    def _judge_constrains_decoding(self, policy: FusionPolicy) -> bool:
        """Whether the judge's engine decodes under a ``response_format`` grammar."""
        if policy.judge not in self.cfg.aliases:
            return False
        return backend(self.cfg.engine_owner(policy.judge).backend).constrains_decoding

    def _readers(self, policy: FusionPolicy) -> list[str]:
        """The fleet models that read the conversation: every panel member and the judge."""
        return [m for m in (*policy.panel, policy.judge) if m in self.cfg.aliases]

    async def _prepare_session(self, ctx: RequestContext, policy: FusionPolicy) -> Optional[PreparedTurn]:
        if self.sessions is None or ctx.session_id is None:
            return None
        # Every member and the judge read the history: it must fit the smallest of them.
        window = min((self.cfg.context_limit(m) for m in self._readers(policy)), default=None)
        budget = None if window is None else history_budget(
            window, ctx.body.get("max_completion_tokens") or ctx.body.get("max_tokens"),
            self.cfg.sessions.output_reserve_tokens)
        return await prepare_turn(self.sessions, ctx.session_id, ctx.task_type, ctx.body["messages"],
                                  prompt_budget=budget)
