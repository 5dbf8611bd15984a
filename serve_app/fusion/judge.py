"""The judge stages: the optional JSON analysis call, then the final (tool-capable) call.

``separate``: analysis (text-only, JSON with the five keys, parsed with the shared
``extract_json``; unparseable output is kept raw with ``parse_failed``; a failed call is
recorded and synthesis continues from the panel) then synthesis. ``one_call`` and ``none``:
the final call only. Only the final call receives the client's ``tools`` / ``tool_choice``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..fleet.protocol import Fleet
from ..jsonutil import JSONExtractionError, extract_json
from ..messages.view import first_choice, first_message
from .messages import compact_json, sub_request
from .panel import MemberResult
from .policy import FusionPolicy
from .templates import PromptSet, render

SAMPLING_TRACED = ("temperature", "top_p", "max_tokens", "frequency_penalty", "presence_penalty")
ANALYSIS_KEYS = ("consensus", "contradictions", "partial_coverage", "unique_insights", "blind_spots")


@dataclass
class JudgeCall:
    stage: str                      # "analysis" | "synthesis"
    model: str
    status: str = "pending"         # "ok" | "error"
    latency_ms: Optional[float] = None
    response: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    exception: Optional[Exception] = field(default=None, repr=False)
    # The sampling Fusion sent (those of SAMPLING_TRACED the body sets; the model's sampling
    # defaults fill the rest): the analysis's may differ from the request's (its 384-token
    # room, the judge model's frequency penalty).
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def usage(self) -> Optional[dict[str, Any]]:
        return (self.response or {}).get("usage") if self.status == "ok" else None

    def trace(self) -> dict[str, Any]:
        entry = {"stage": self.stage, "model": self.model, "status": self.status,
                 "latency_ms": self.latency_ms, "usage": self.usage, "sampling": self.sampling}
        if self.error:
            entry["error"] = self.error
        return entry


@dataclass
class AnalysisResult:
    call: JudgeCall
    # Parsed JSON, or {"raw": ..., "parse_failed": True} (with "cut": True when the call ended at
    # its token limit), or {"error": ..., "failed": True}.
    trace: dict[str, Any] = field(default_factory=dict)
    # What {{analysis}} renders to in the synthesis prompt.
    prompt_text: str = ""


def render_responses(members: list[MemberResult], scores: dict[int, float],
                     note: str = "", texts: Optional[list[str]] = None) -> str:
    """The ``{{responses}}`` block: numbered answers with their model and grounding score
    (``texts`` replaces the answers, e.g. by their budgeted cuts)."""
    blocks = []
    for n, member in enumerate(members, start=1):
        header = f"--- Response {n} (model: {member.model}"
        if member.index in scores:
            header += f", grounding score: {scores[member.index]:.2f}"
        header += ") ---"
        message = first_message(member.response or {})
        body = member.text if texts is None else texts[n - 1]
        if not (message.get("content") or "").strip():
            header += "\n(reasoning only; the model gave no final answer)"
        blocks.append(f"{header}\n{body}")
    return note + "\n\n".join(blocks)


async def _call(fleet: Fleet, stage: str, model: str, body: dict[str, Any]) -> JudgeCall:
    call = JudgeCall(stage=stage, model=model,
                     sampling={k: body[k] for k in SAMPLING_TRACED if body.get(k) is not None})
    started = time.perf_counter()
    try:
        call.response = await fleet.client(model).complete(body)
        call.status = "ok"
    except Exception as exc:  # recorded; the caller decides whether it is terminal
        call.status, call.error = "error", str(exc) or type(exc).__name__
        call.error_type, call.exception = type(exc).__name__, exc
    call.latency_ms = (time.perf_counter() - started) * 1000
    return call


def _prompt_body(request: dict[str, Any], prompt: str, policy: FusionPolicy, *,
                 final: bool, max_tokens: Optional[int] = None) -> dict[str, Any]:
    return sub_request(request, [{"role": "user", "content": prompt}],
                       temperature=policy.temperature,
                       max_completion_tokens=max_tokens or policy.max_completion_tokens, final=final)


def parse_analysis(text: str) -> dict[str, Any]:
    try:
        parsed = extract_json(text)
    except JSONExtractionError:
        return {"raw": text, "parse_failed": True}
    missing = [k for k in ANALYSIS_KEYS if k not in parsed]
    if missing:
        parsed = {**parsed, "missing_keys": missing}
    return parsed


def _whole_json(text: str) -> bool:
    """The text is one complete JSON value as written, with nothing repaired."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # a degenerate "[[[[..." is not whole either
        return False
    return True


def analysis_prompt(policy: FusionPolicy, prompts: PromptSet, original: str, responses: str) -> str:
    template = policy.analysis_template if policy.analysis_template and \
        policy.analysis_template.strip() else prompts.analysis
    return render(template, {"original": original, "responses": responses})


async def run_analysis(fleet: Fleet, policy: FusionPolicy, request: dict[str, Any], prompt: str,
                       max_tokens: Optional[int] = None,
                       schema: Optional[dict[str, Any]] = None) -> AnalysisResult:
    """The separate-mode analysis call; never raises for a model failure. With ``schema`` the
    engine constrains the answer to it (vLLM structured outputs), so even a small judge answers
    in the five keys; ``extract_json`` and repair stay for engines that do not constrain."""
    body = _prompt_body(request, prompt, policy, final=False, max_tokens=max_tokens)
    if policy.analysis_frequency_penalty is not None:
        body["frequency_penalty"] = policy.analysis_frequency_penalty
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "fusion_analysis", "schema": schema}}
    call = await _call(fleet, "analysis", policy.judge, body)
    if call.status != "ok":
        return AnalysisResult(call=call, trace={"failed": True, "error": call.error})
    content = first_message(call.response or {}).get("content") or ""
    text = content if isinstance(content, str) else ""
    parsed = parse_analysis(text)
    if first_choice(call.response or {}).get("finish_reason") == "length" and not _whole_json(text):
        # Cut at max_tokens before its JSON closed: a fragment, on a small judge usually a
        # repetition loop, that the synthesis would copy. extract_json may still close its
        # brackets, but its last value is cut and later keys are missing, so this holds whether
        # or not it parsed. It stays in the trace; the answer is synthesised from the panel
        # (the prompt's analysis is empty, "unavailable"), its raw text with it.
        parsed.update(raw=text, cut=True)
        prompt_text = ""
    elif not parsed.get("parse_failed"):
        prompt_text = compact_json({k: v for k, v in parsed.items() if k != "missing_keys"})
    else:
        prompt_text = parsed["raw"]  # a whole answer in prose: the judge's reading still helps
    return AnalysisResult(call=call, trace=parsed, prompt_text=prompt_text)


def final_prompt(policy: FusionPolicy, prompts: PromptSet, original: str, responses: str,
                 analysis: str) -> str:
    template = policy.synthesis_template if policy.synthesis_template and \
        policy.synthesis_template.strip() else prompts.terminal(policy.analysis_mode)
    # one_call / none have no analysis artefact: {{analysis}} renders empty there.
    values = {"original": original, "responses": responses,
              "analysis": analysis if policy.analysis_mode == "separate" else ""}
    prompt = render(template, values)
    if policy.output_contract and policy.output_contract.strip():
        prompt += render(prompts.output_contract, {"output_contract": policy.output_contract.strip()})
    return prompt


async def run_final(fleet: Fleet, policy: FusionPolicy, request: dict[str, Any],
                    prompt: str, max_tokens: Optional[int] = None) -> JudgeCall:
    """The terminal call: the only one with the client's tools. The caller raises on failure."""
    body = _prompt_body(request, prompt, policy, final=True, max_tokens=max_tokens)
    return await _call(fleet, "synthesis", policy.judge, body)
