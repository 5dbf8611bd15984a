"""Decision selection: every decision whose rules hold is a candidate; the winner is the
highest priority, then the highest confidence, then the alphabetically first name (so ties
are deterministic and an operator can predict them from the config alone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from ..config.routing import Decision
from .rules import evaluate_rule
from .signals.base import SignalMatch


@dataclass(frozen=True)
class DecisionMatch:
    decision: Decision
    confidence: float
    conditions: tuple[str, ...]

    def sort_key(self) -> tuple:
        return (-self.decision.priority, -self.confidence, self.decision.name)


def matching_decisions(decisions: Iterable[Decision], matches: Mapping[str, SignalMatch]) -> list[DecisionMatch]:
    """Matched decisions in selection order (best first)."""
    out: list[DecisionMatch] = []
    for decision in decisions:
        if decision.rules is None:
            # A rule-less decision matches everything, with no evidence behind it.
            out.append(DecisionMatch(decision, 0.0, ()))
            continue
        outcome = evaluate_rule(decision.rules, matches)
        if outcome.matched:
            out.append(DecisionMatch(decision, outcome.confidence, outcome.conditions))
    return sorted(out, key=DecisionMatch.sort_key)


def select_decision(decisions: Iterable[Decision], matches: Mapping[str, SignalMatch]) -> Optional[DecisionMatch]:
    ranked = matching_decisions(decisions, matches)
    return ranked[0] if ranked else None


def primary_model(decision: Decision) -> str:
    """The model that serves a decision: the Fusion judge, else the heaviest modelRef (first on ties)."""
    fusion = decision.algorithm.fusion
    if fusion is not None:
        if fusion.model:
            return fusion.model
        if fusion.analysis_models:
            return fusion.analysis_models[0]
    return max(decision.model_refs, key=lambda ref: ref.weight).model
