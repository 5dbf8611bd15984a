"""Fusion parameters (SPEC §5), defined once.

:class:`FusionParams` is the single definition of every parameter. A decision's ``algorithm.fusion``
is a ``FusionParams``; the fields a request may override (``plugins[].id == "fusion"``) are a
subset of it (:data:`REQUEST_OVERRIDABLE`, turned into a model by ``fusion_override_model``);
the resolved per-request policy (``serve_app.fusion.policy.FusionPolicy``) carries a merged
``FusionParams`` plus what resolution decides (judge, panel, quorum).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, create_model, field_validator

from .base import AnalysisMode, OnError, Strict

class AnalysisOverride(Strict):
    """Sampling of one panel member (SPEC §5 ``analysis_overrides``), keyed by ``model``."""

    model: str = Field(..., min_length=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    max_completion_tokens: Optional[int] = Field(None, ge=1)


class GroundingSettings(Strict):
    """Agreement scoring of panel answers before the judge (Fusion ``grounding``).

    Scores come from the embedding deployment: each answer's cosine agreement with the other
    answers (``panel``), with the request's context messages (``context``), or a blend of both
    when context is present (``hybrid``). It measures agreement, not truth.
    """

    enabled: bool = False
    reference: Literal["hybrid", "context", "panel"] = "hybrid"
    # weight: keep all and ask the judge to weight by score; annotate: keep all, show scores;
    # filter: drop answers under min_score but always keep the min_keep best.
    policy: Literal["weight", "annotate", "filter"] = "weight"
    min_score: float = Field(0.0, ge=0, le=1)
    min_keep: int = Field(1, ge=1)
    # Share of the context agreement in a hybrid score when the request carries context.
    context_weight: float = Field(0.5, ge=0, le=1)
    # skip: an unavailable embedder falls back to plain Fusion; fail: the request fails.
    on_error: Literal["skip", "fail"] = "skip"


# What a decision's analysis_template / synthesis_template may name (serve_app.fusion.templates
# renders them); any other {{name}} is a load error.
TEMPLATE_PLACEHOLDERS = ("original", "responses", "analysis")
_ANY_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


class FusionParams(Strict):
    """Every Fusion parameter of SPEC §5; None means "use the documented default"."""

    model: Optional[str] = None
    analysis_models: Optional[list[str]] = Field(None, min_length=1)
    analysis_mode: AnalysisMode = "separate"
    analysis_overrides: list[AnalysisOverride] = Field(default_factory=list)
    max_concurrent: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    # frequency_penalty of the separate-mode analysis call only; None: the judge model's
    # fusion_judge default (serve_app.config.models.FusionJudgeSettings says why), else none.
    analysis_frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    round_timeout_seconds: Optional[float] = Field(None, gt=0)
    min_successful_responses: Optional[int] = Field(None, ge=1)
    on_error: OnError = "skip"
    include_analysis: bool = True
    include_intermediate_responses: bool = True
    analysis_template: Optional[str] = None
    synthesis_template: Optional[str] = None
    # A directory name under the prompts root (or a label only, when no such set exists): no
    # path separators, so "/" or "../x" cannot send the judge's prompts outside it.
    judge_prompt_version: str = Field("fusion-v1", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    grounding: GroundingSettings = Field(default_factory=GroundingSettings)

    @field_validator("analysis_overrides", mode="before")
    @classmethod
    def _override_forms(cls, value: Any) -> Any:
        # The seed's list form is canonical; the mapping {model: {temperature: ...}} is shorter.
        if isinstance(value, dict):
            return [{"model": name, **spec} if isinstance(spec, dict) else spec
                    for name, spec in value.items()]
        return value

    def effective_panel(self, model_refs: list[str]) -> list[str]:
        """``analysis_models`` when set, else the decision's modelRefs (SPEC §5 default)."""
        return list(self.analysis_models) if self.analysis_models else list(model_refs)

    def override_for(self, model: str) -> Optional[AnalysisOverride]:
        return next((o for o in self.analysis_overrides if o.model == model), None)

    def rule_violations(self, panel: list[str]) -> list[tuple[str, str]]:
        """Cross-field rules for an effective ``panel``, as (sub-path, message) pairs.

        Shared by the load-time check (Decision._fusion_rules) and the per-request override
        check of the Fusion policy, so both reject exactly the same combinations.
        """
        problems: list[tuple[str, str]] = []
        if self.min_successful_responses is not None and self.min_successful_responses > len(panel):
            problems.append(("min_successful_responses",
                             f"{self.min_successful_responses} exceeds the effective panel size "
                             f"{len(panel)} ({', '.join(panel)}); quorums are never lowered automatically"))
        if self.analysis_template and self.analysis_template.strip() and self.analysis_mode != "separate":
            problems.append(("analysis_template",
                             f"a non-empty analysis_template is only used by analysis_mode: separate "
                             f"(this decision uses {self.analysis_mode!r})"))
        for key in ("analysis_template", "synthesis_template"):
            unknown = sorted(set(_ANY_PLACEHOLDER.findall(getattr(self, key) or "")) - set(TEMPLATE_PLACEHOLDERS))
            if unknown:
                # Left as literal text, a misspelt {{responses}} would hide the panel's answers.
                problems.append((key, f"unknown placeholder(s) {', '.join('{{' + u + '}}' for u in unknown)}; "
                                      f"a template may use {', '.join('{{' + p + '}}' for p in TEMPLATE_PLACEHOLDERS)}"))
        seen: set[str] = set()
        for i, override in enumerate(self.analysis_overrides):
            if override.model not in panel:
                problems.append((f"analysis_overrides[{i}].model",
                                 f"{override.model!r} is not on the panel ({', '.join(panel)})"))
            elif override.model in seen:
                problems.append((f"analysis_overrides[{i}].model",
                                 f"duplicate override for {override.model!r}"))
            seen.add(override.model)
        return problems


# The fields a request's ``plugins[].id == "fusion"`` may override: judge, panel and runtime
# knobs. Prompts, the prompt version and grounding stay with the operator's decision.
REQUEST_OVERRIDABLE: tuple[str, ...] = (
    "model", "analysis_models", "analysis_mode", "analysis_overrides", "max_concurrent",
    "max_completion_tokens", "temperature", "analysis_frequency_penalty", "round_timeout_seconds",
    "min_successful_responses", "on_error", "include_analysis", "include_intermediate_responses")


def _override_model() -> type[Strict]:
    """``plugins[].id == "fusion"``: each overridable field of :class:`FusionParams` with its own
    type and constraints, optional (None = keep the decision's value)."""
    fields: dict[str, Any] = {"id": (Literal["fusion"], ...)}
    for name in REQUEST_OVERRIDABLE:
        info = FusionParams.model_fields[name]
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = (Optional[annotation], None)
    forms = field_validator("analysis_overrides", mode="before")(
        lambda cls, value: FusionParams._override_forms(value))
    return create_model("FusionOverride", __base__=Strict,
                        __validators__={"_override_forms": forms}, **fields)


FusionOverride = _override_model()
