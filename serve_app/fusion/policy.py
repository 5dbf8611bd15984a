"""Resolve the Fusion policy of one request: decision config + modelRefs + request override.

``resolve_policy`` is the first two stages of SPEC §5 (resolve policy, recursion guard). It
returns a :class:`FusionPolicy` with every default filled in, or raises ``InvalidRequest``: the
looper never sees an ambiguous or recursive policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from pydantic import ValidationError

from ..config.fusion import FusionOverride, FusionParams
from ..config.loader import validation_problems
from ..config.models import ModelSettings
from ..config.routing import Decision
from ..config.schema import HorizonConfig
from ..errors import InvalidRequest

FUSION_PLUGIN_ID = "fusion"
# Name of the decision built for a request that brings its own panel and matched no Fusion
# decision (SPEC §3).
DIRECT_DECISION_NAME = "fusion_direct"
# Response ``model`` when the request did not name a routing slug.
DEFAULT_RESPONSE_MODEL = "fusion"


@dataclass(frozen=True)
class FusionPolicy:
    """Everything the looper needs, defaults resolved.

    Every Fusion parameter comes from ``params`` (one :class:`FusionParams`, the decision's
    merged with the request's override) and reads as an attribute of the policy
    (``policy.analysis_mode``, ``policy.temperature``, ...). The fields below are what resolution
    adds: who judges, who sits on the panel, the effective quorum and concurrency, and facts of
    the judge's model used to budget its prompts.
    """

    decision: str
    params: FusionParams
    judge: str
    panel: tuple[str, ...]
    max_concurrent: int
    min_successful_responses: int
    output_contract: Optional[str] = None
    response_model: str = DEFAULT_RESPONSE_MODEL
    # Fields the request's fusion plugin set (written into the trace).
    request_overrides: tuple[str, ...] = ()
    # The judge's context window and its configured answer limit: the panel's answers are
    # budgeted into the window (serve_app.fusion.budget). None = not budgeted.
    judge_context_tokens: Optional[int] = None
    judge_max_tokens: Optional[int] = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: the Fusion parameters themselves.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.params, name)

    @property
    def prompt_version(self) -> str:
        return self.params.judge_prompt_version

    @classmethod
    def from_params(cls, decision: str, params: FusionParams, model_refs: list[str], *,
                    output_contract: Optional[str] = None,
                    response_model: str = DEFAULT_RESPONSE_MODEL,
                    request_overrides: tuple[str, ...] = ()) -> "FusionPolicy":
        panel = params.effective_panel(model_refs)
        if not panel:
            raise ValueError("a Fusion panel needs at least one model")
        return cls(decision=decision, params=params, judge=params.model or panel[0],
                   panel=tuple(panel), max_concurrent=params.max_concurrent or len(panel),
                   min_successful_responses=params.min_successful_responses or len(panel),
                   output_contract=output_contract, response_model=response_model,
                   request_overrides=request_overrides)


def no_eligible_decision_error(slug: str) -> InvalidRequest:
    return InvalidRequest(
        f'no eligible Fusion decision matched for model "{slug}" and no request '
        "plugins[].id=fusion analysis_models override was provided",
        param="model", code="fusion_no_eligible_decision")


def _plugin_index(request: dict[str, Any]) -> Optional[int]:
    plugins = request.get("plugins")
    if plugins is None:
        return None
    if not isinstance(plugins, list) or not all(isinstance(p, dict) for p in plugins):
        raise InvalidRequest("plugins must be a list of objects", param="plugins")
    found = [i for i, p in enumerate(plugins) if p.get("id") == FUSION_PLUGIN_ID]
    if len(found) > 1:
        raise InvalidRequest("at most one plugins[].id=fusion entry is allowed",
                             param=f"plugins[{found[1]}]")
    return found[0] if found else None


def find_fusion_plugin(request: dict[str, Any]) -> dict[str, Any] | None:
    """The request's ``plugins[]`` entry with ``id == "fusion"``, if any."""
    index = _plugin_index(request)
    return None if index is None else request["plugins"][index]


def request_panel_param(request: dict[str, Any]) -> Optional[str]:
    """``plugins[i].analysis_models`` when the request names its own Fusion panel, else None
    (what the per-key ``fusion_request_panels`` permission is checked against)."""
    index = _plugin_index(request)
    if index is None or request["plugins"][index].get("analysis_models") is None:
        return None
    return f"plugins[{index}].analysis_models"


def _parse_plugin(plugin: dict[str, Any], param: str) -> Any:
    try:
        return FusionOverride.model_validate(plugin)
    except ValidationError as exc:
        key, msg = validation_problems(exc)[0]
        if msg == "unknown key":
            msg = "unknown Fusion override field"
        raise InvalidRequest(f"invalid fusion plugin: {msg}", param=f"{param}.{key}" if key else param) from None


def _check_models(cfg: HorizonConfig, judge: str, panel: list[str], plugin_set: set[str],
                  param: str) -> None:
    """Recursion guard and fleet check, per request (load time checks the decisions)."""
    slugs = set(cfg.fusion_slugs) | set(cfg.auto_slugs)
    chat_models = {m.alias for m in cfg.models if m.role != "embedding"}
    chat_models |= {u.alias for u in cfg.unavailable_models if u.role != "embedding"}
    # Panel first: a judge that defaults to the first panel model is reported there.
    named = [(f"analysis_models[{j}]", m) for j, m in enumerate(panel)] + [("model", judge)]
    for key, alias in named:
        where = f"{param}.{key}" if key.split("[")[0] in plugin_set else param
        if alias in slugs:
            raise InvalidRequest(f"{alias!r} is a Fusion/routing slug and can never be a judge or "
                                 "panel model (no recursive Fusion)", param=where)
        if alias not in chat_models:
            raise InvalidRequest(f"unknown model {alias!r} in the Fusion override; expected one of "
                                 f"{sorted(chat_models)}", param=where)


def resolve_policy(cfg: HorizonConfig, decision: Decision | None, plugin: dict | None,
                   request: dict) -> FusionPolicy:
    """Merge the decision's Fusion config with the request override into a policy.

    ``decision`` is the routing choice (None, or a non-Fusion decision, means no eligible Fusion
    decision). Without one, a plugin with ``analysis_models`` runs the request-scoped decision
    ``fusion_direct``; otherwise the exact no-eligible-decision 400 is raised.
    """
    slug = str(request.get("model") or "")
    index = _plugin_index(request) if plugin is not None else None
    param = f"plugins[{index}]" if index is not None else "plugins"
    override = _parse_plugin(plugin, param) if plugin is not None else None
    updates = override.model_dump(exclude_unset=True, exclude={"id"}) if override else {}
    updates = {k: v for k, v in updates.items() if v is not None}

    if decision is not None and decision.algorithm.type == "fusion" and decision.algorithm.fusion:
        base, name = decision.algorithm.fusion, decision.name
        refs = [r.model for r in decision.model_refs]
        contract = decision.output_contract
    elif updates.get("analysis_models"):
        base, name, refs, contract = FusionParams(), DIRECT_DECISION_NAME, [], None
    else:
        raise no_eligible_decision_error(slug)

    merged_doc = base.model_dump()
    if "analysis_models" in updates and "analysis_overrides" not in updates:
        # The decision's per-model tuning still applies to members that stay on the panel.
        merged_doc["analysis_overrides"] = [o for o in merged_doc["analysis_overrides"]
                                            if o["model"] in updates["analysis_models"]]
    merged_doc.update(updates)
    merged = FusionParams.model_validate(merged_doc)
    panel = merged.effective_panel(refs)
    limit = cfg.global_.integrations.looper.fusion.max_panel_size
    if len(panel) > limit:
        # Checked before anything else about the members: the bound exists so that one request
        # cannot fan out to hundreds of model calls.
        raise InvalidRequest(f"a Fusion panel of {len(panel)} models exceeds the maximum of {limit} "
                             "(global.integrations.looper.fusion.max_panel_size)",
                             param=f"{param}.analysis_models", code="fusion_panel_too_large")
    for sub_path, message in merged.rule_violations(panel):
        root = sub_path.split(".")[0].split("[")[0]
        where = f"{param}.{sub_path}" if root in updates else param
        raise InvalidRequest(f"invalid Fusion override: {sub_path}: {message}", param=where)
    _check_models(cfg, merged.model or panel[0], panel, set(updates), param)

    routing_slugs = set(cfg.fusion_slugs) | set(cfg.auto_slugs)
    policy = FusionPolicy.from_params(
        name, merged, refs, output_contract=contract,
        response_model=slug if slug in routing_slugs else DEFAULT_RESPONSE_MODEL,
        request_overrides=tuple(sorted(updates)))
    if policy.judge in cfg.aliases:
        judge = cfg.model(policy.judge)
        params = policy.params
        if params.analysis_frequency_penalty is None:
            params = params.model_copy(update={
                "analysis_frequency_penalty": _judge_default_penalty(cfg, judge)})
        policy = replace(policy, params=params, judge_context_tokens=cfg.context_limit(policy.judge),
                         judge_max_tokens=judge.sampling.max_tokens)
    return policy


def _judge_default_penalty(cfg: HorizonConfig, model: ModelSettings) -> Optional[float]:
    """The judge model's own ``fusion_judge`` default; an alias that shares another's engine
    runs the same weights, so without its own it has the owner's."""
    penalty = model.fusion_judge.analysis_frequency_penalty
    if penalty is None and model.shares_engine_with:
        penalty = cfg.model(model.shares_engine_with).fusion_judge.analysis_frequency_penalty
    return penalty
