"""Recursive rule trees (AND / OR / NOT over signal conditions) evaluated against signal matches.

Confidence of a matched tree: AND takes its weakest child (every part must hold), OR its
strongest matched child, NOT is certain (1.0) when its child did not match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from ..config.routing import Condition, Decision, RuleNode
from .signals.base import SignalMatch


@dataclass(frozen=True)
class RuleOutcome:
    matched: bool
    confidence: float
    # The conditions that made the tree true ("type:name"), for traces.
    conditions: tuple[str, ...] = ()


_NO = RuleOutcome(False, 0.0)


def index_matches(matches: Iterable[SignalMatch]) -> dict[str, SignalMatch]:
    """Matches by "type:name"; a name found twice keeps its most confident match."""
    out: dict[str, SignalMatch] = {}
    for m in matches:
        if m.label() not in out or m.confidence > out[m.label()].confidence:
            out[m.label()] = m
    return out


def evaluate_rule(node: Union[RuleNode, Condition], matches: Mapping[str, SignalMatch]) -> RuleOutcome:
    if isinstance(node, Condition):
        found = matches.get(f"{node.type}:{node.name}")
        return RuleOutcome(True, found.confidence, (found.label(),)) if found else _NO
    children = [evaluate_rule(child, matches) for child in node.conditions]
    if node.operator == "NOT":
        return _NO if children[0].matched else RuleOutcome(True, 1.0)
    hits = [c for c in children if c.matched]
    if node.operator == "AND":
        if len(hits) != len(children):
            return _NO
        return RuleOutcome(True, min(c.confidence for c in hits), sum((c.conditions for c in hits), ()))
    if not hits:  # OR
        return _NO
    return RuleOutcome(True, max(c.confidence for c in hits), sum((c.conditions for c in hits), ()))


def referenced_signal_types(decisions: Iterable[Decision]) -> set[str]:
    return {cond.type for d in decisions for cond in d.rule_conditions()}
