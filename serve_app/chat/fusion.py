"""The Fusion strategy: resolve the policy, run the looper, enforce JSON, report the trace.

The looper (``serve_app.fusion``) runs panel → judge → synthesis with every sub-call guarded;
this module turns a request into its policy and the looper's outcome into the client's answer
(``x-vsr-fusion-*`` headers, a replayed stream when the client streams, stage metrics).
"""

from __future__ import annotations

from ..config.schema import HorizonConfig
from ..errors import InvalidRequest, ModelUnavailable
from ..fusion.looper import FusionLooper
from ..fusion.policy import find_fusion_plugin, resolve_policy
from ..observability.metrics import record_fusion_stage
from ..outputs.structured import contract_from_request, enforce_detailed, prepare_request
from .context import ChatOutcome, RequestContext
from .static import replay
from .tools import check_model_takes_tools


class FusionStrategy:
    def __init__(self, cfg: HorizonConfig, looper: FusionLooper | None):
        self.cfg = cfg
        self.looper = looper

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
        result = await self.looper.run(prepare_request(contract, ctx.body, engine_constrained=False), policy)
        for stage, ms in (result.trace.get("timings_ms") or {}).items():
            if stage != "total":
                record_fusion_stage(policy.decision, stage, ms / 1000)
        if contract is not None:
            # The synthesis cannot constrain decoding: extract, repair and validate its JSON.
            enforced = await enforce_detailed(contract, result.response, None, engine_constrained=False)
            result.response = enforced.response
            headers["x-vsr-structured-output"] = enforced.status
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
