"""The Fusion looper: panel -> failure policy -> grounding -> judge -> final answer + trace.

It knows nothing of HTTP or Ray: it talks to models through the :class:`~serve_app.fleet.protocol.Fleet`
protocol (deployment handles in production, fakes in tests) and returns an OpenAI
``chat.completion`` dict plus the trace. The ingress streams it with
:func:`serve_app.messages.chunks.response_to_chunks` when the client asked for SSE.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..fleet.protocol import Fleet
from ..errors import ContextLengthExceeded, HorizonError, UpstreamError
from ..messages.view import estimate_text_tokens, first_message
from .panel import MemberResult
from .grounding import GroundingReport, ground
from .budget import (ANALYSIS_RESERVE_TOKENS, TEMPLATE_MARGIN_TOKENS, FittedAnswers, answer_reserve, completion_room, cut_text,
                     fit_answers)
from .judge import AnalysisResult, JudgeCall, analysis_prompt, final_prompt, render_responses, \
    run_analysis, run_final
from .messages import sum_usage, transcript
from .panel import PanelRound, check_quorum, run_panel
from .policy import FusionPolicy
from .templates import PromptTemplates
from .trace import body_trace, trace_headers

log = logging.getLogger(__name__)


@dataclass
class FusionOutcome:
    response: dict[str, Any]
    trace: dict[str, Any] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        return trace_headers(self.trace)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


class FusionLooper:
    def __init__(self, fleet: Fleet, templates: PromptTemplates | None = None):
        self.fleet = fleet
        self.templates = templates or PromptTemplates()

    async def run(self, request: dict[str, Any], policy: FusionPolicy) -> FusionOutcome:
        started = time.perf_counter()
        prompts = self.templates.get(policy.prompt_version)
        timings: dict[str, float] = {}

        original = transcript(list(request.get("messages") or []))
        # A conversation the judge cannot even read is a 400 before any panel call is spent.
        self._fitted_prompt(lambda responses: final_prompt(policy, prompts, original, responses, ""),
                            policy, [], {}, "", self._reserve(policy, request), {}, "synthesis")
        panel = await run_panel(self.fleet, policy, request)
        timings["panel"] = round(panel.elapsed_ms, 3)
        check_quorum(panel, policy)

        judged = panel.usable
        scores: dict[int, float] = {}
        note = ""
        grounding: GroundingReport | None = None
        if policy.grounding.enabled:
            stage = time.perf_counter()
            grounding = await ground(panel.usable, request, policy.grounding, self.fleet.embedder)
            timings["grounding"] = _ms(stage)
            if grounding.applied:
                judged, scores = grounding.kept, grounding.scores
                note = prompts.grounding_weight if policy.grounding.policy == "weight" \
                    else prompts.grounding_annotate

        judge_calls: list[JudgeCall] = []
        budgets: dict[str, Any] = {}
        analysis: AnalysisResult | None = None
        if policy.analysis_mode == "separate":
            stage = time.perf_counter()
            # The analysis is bounded by its schema, not by the judge's answer limit: it keeps
            # at least ANALYSIS_RESERVE_TOKENS and may use what the window leaves.
            reserve = self._reserve(policy, request, at_least=ANALYSIS_RESERVE_TOKENS)
            prompt = self._fitted_prompt(
                lambda responses: analysis_prompt(policy, prompts, original, responses),
                policy, judged, scores, note, reserve, budgets, "analysis")
            analysis = await run_analysis(self.fleet, policy, request, prompt,
                                          max_tokens=self._room(policy, request, prompt, use_model_default=False,
                                                                at_least=ANALYSIS_RESERVE_TOKENS),
                                          schema=prompts.analysis_schema)
            judge_calls.append(analysis.call)
            timings["analysis"] = _ms(stage)

        stage = time.perf_counter()
        analysis_text = self._capped_analysis(policy, analysis)
        prompt = self._fitted_prompt(
            lambda responses: final_prompt(policy, prompts, original, responses, analysis_text),
            policy, judged, scores, note, self._reserve(policy, request), budgets, "synthesis")
        final = await run_final(self.fleet, policy, request, prompt,
                                max_tokens=self._room(policy, request, prompt))
        judge_calls.append(final)
        timings["synthesis"] = _ms(stage)
        timings["total"] = _ms(started)

        trace = self._trace(policy, panel, grounding, analysis, judge_calls, timings)
        if budgets:
            trace["context_budget"] = {"judge_window_tokens": policy.judge_context_tokens, **budgets}
        if final.status != "ok":
            raise self._terminal_error(final, trace)
        response = self._response(final.response or {}, policy, panel, judge_calls, trace)
        log.debug("fusion decision=%s judge=%s usable=%d/%d iterations=%d ms=%.1f",
                  policy.decision, policy.judge, len(panel.usable), len(panel.members),
                  trace["iterations"], timings["total"])
        return FusionOutcome(response=response, trace=trace)

    # ------------------------------------------------------------------ context budget
    @staticmethod
    def _requested_tokens(policy: FusionPolicy, request: dict[str, Any], at_least: int = 0) -> Optional[int]:
        """The limit asked for (the policy's, else the request's), raised to ``at_least``: the
        analysis keeps its schema's room, since a JSON analysis cut at a short answer's limit
        (a client's ``max_tokens: 48``) is lost, and that limit is meant for the answer."""
        requested = policy.max_completion_tokens or request.get("max_completion_tokens") \
            or request.get("max_tokens")
        return max(requested, at_least) if requested and at_least else requested

    def _reserve(self, policy: FusionPolicy, request: dict[str, Any], at_least: int = 0) -> int:
        window = policy.judge_context_tokens or 0
        default = max(policy.judge_max_tokens or 0, at_least) or None
        return answer_reserve(window, self._requested_tokens(policy, request, at_least), default)

    def _room(self, policy: FusionPolicy, request: dict[str, Any], prompt: str,
              use_model_default: bool = True, at_least: int = 0) -> Optional[int]:
        """The judge call's max_tokens: what its window leaves (no more than asked for); with
        no known window, what was asked for (None: the call's own defaults)."""
        requested = self._requested_tokens(policy, request, at_least)
        if not policy.judge_context_tokens:
            return requested
        return completion_room(policy.judge_context_tokens, estimate_text_tokens(prompt), requested,
                               policy.judge_max_tokens if use_model_default else None)

    @staticmethod
    def _capped_analysis(policy: FusionPolicy, analysis: AnalysisResult | None) -> str:
        """The analysis as the synthesis prompt carries it: at most a quarter of the window (an
        unparsed analysis can be as long as the judge's whole answer)."""
        text = analysis.prompt_text if analysis else ""
        if not policy.judge_context_tokens or not text:
            return text
        limit = policy.judge_context_tokens // 4
        return cut_text(text, limit, estimate_text_tokens(text))

    @staticmethod
    def _fitted_prompt(build: Callable[[str], str], policy: FusionPolicy, judged: list[MemberResult],
                       scores: dict[int, float], note: str, reserve: int, budgets: dict[str, Any],
                       stage: str) -> str:
        """The judge prompt ``build(responses)`` with the answers cut, fairly, to fit the window."""
        window = policy.judge_context_tokens
        if not window:
            return build(render_responses(judged, scores, note))
        empty = build(render_responses(judged, scores, note, texts=[""] * len(judged)))
        fixed = estimate_text_tokens(empty) + TEMPLATE_MARGIN_TOKENS
        available = window - fixed - reserve
        if available < 0:
            raise ContextLengthExceeded(
                f"the conversation does not fit the Fusion judge {policy.judge!r}: its window is "
                f"{window} tokens and the {stage} prompt without any panel answer already needs about "
                f"{fixed} plus {reserve} for the answer; shorten the messages", param="messages")
        fitted: FittedAnswers = fit_answers([m.text for m in judged], [m.model for m in judged],
                                            [m.index for m in judged], available)
        budgets[stage] = fitted.trace()
        return build(render_responses(judged, scores, note, texts=fitted.texts))

    # ------------------------------------------------------------------ assembly
    @staticmethod
    def _trace(policy: FusionPolicy, panel: PanelRound, grounding: GroundingReport | None,
               analysis: AnalysisResult | None, judge_calls: list[JudgeCall],
               timings: dict[str, float]) -> dict[str, Any]:
        trace: dict[str, Any] = {
            "decision": policy.decision,
            "judge_model": policy.judge,
            "analysis_models": list(policy.panel),
            "analysis_mode": policy.analysis_mode,
            "prompt_version": policy.prompt_version,
            "on_error": policy.on_error,
            "min_successful_responses": policy.min_successful_responses,
            "max_concurrent": policy.max_concurrent,
            "request_overrides": list(policy.request_overrides),
            "analysis": analysis.trace if analysis else None,
            "responses": [m.trace() for m in panel.members],
            "failed_models": [m.failure() for m in panel.failed],
            "usable_responses": len(panel.usable),
            "panel_timed_out": panel.timed_out,
            "judge_calls": [c.trace() for c in judge_calls],
            "timings_ms": timings,
            # SPEC §5: panel attempts + judge calls.
            "iterations": panel.attempts + len(judge_calls),
        }
        if grounding is not None:
            trace["grounding"] = grounding.trace
        return trace

    @staticmethod
    def _terminal_error(final: JudgeCall, trace: dict[str, Any]) -> HorizonError:
        error = final.exception if isinstance(final.exception, HorizonError) else \
            UpstreamError(f"Fusion synthesis call to {final.model!r} failed: {final.error}")
        error.details.setdefault("fusion", {
            "decision": trace["decision"], "stage": "synthesis", "judge_model": trace["judge_model"],
            "failed_models": trace["failed_models"], "iterations": trace["iterations"]})
        return error

    @staticmethod
    def _response(final: dict[str, Any], policy: FusionPolicy, panel: PanelRound,
                  judge_calls: list[JudgeCall], trace: dict[str, Any]) -> dict[str, Any]:
        message = dict(first_message(final))
        message.setdefault("role", "assistant")
        choice = dict((final.get("choices") or [{}])[0])
        choice["index"] = 0
        choice["message"] = message
        if message.get("tool_calls"):
            choice["finish_reason"] = "tool_calls"
        else:
            message.pop("tool_calls", None)
            choice["finish_reason"] = choice.get("finish_reason") or "stop"
        usage = sum_usage([m.usage for m in panel.members if m.response is not None]
                          + [c.usage for c in judge_calls])
        response = {
            "id": final.get("id") or f"chatcmpl-fusion-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(final.get("created") or time.time()),
            "model": policy.response_model,
            "choices": [choice],
            "usage": usage,
        }
        if final.get("system_fingerprint"):
            response["system_fingerprint"] = final["system_fingerprint"]
        visible = body_trace(trace, policy.include_analysis, policy.include_intermediate_responses)
        if visible is not None:
            response["fusion"] = visible
        return response
