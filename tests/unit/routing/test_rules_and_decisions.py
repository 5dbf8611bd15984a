"""Rule trees (AND / OR / NOT, nested) and decision ordering: priority, confidence, name."""

import pytest

from serve_app.config.routing import Decision, RuleNode
from serve_app.routing.decisions import matching_decisions, primary_model, select_decision
from serve_app.routing.rules import evaluate_rule, index_matches, referenced_signal_types
from serve_app.routing.signals.base import SignalMatch


def matches(*items):
    return index_matches(SignalMatch(t, n, c) for t, n, c in items)


def rule(spec):
    return RuleNode.model_validate(spec)


def cond(t, n):
    return {"type": t, "name": n}


def test_and_or_confidences():
    m = matches(("intent", "code", 0.7), ("code", "fenced", 1.0))
    both = evaluate_rule(rule({"operator": "AND", "conditions": [cond("intent", "code"), cond("code", "fenced")]}), m)
    assert both.matched and both.confidence == 0.7 and set(both.conditions) == {"intent:code", "code:fenced"}
    either = evaluate_rule(rule({"operator": "OR", "conditions": [cond("intent", "chat"), cond("intent", "code")]}), m)
    assert either.matched and either.confidence == 0.7 and either.conditions == ("intent:code",)
    missing = evaluate_rule(rule({"operator": "AND", "conditions": [cond("intent", "code"), cond("code", "syntax")]}), m)
    assert not missing.matched


def test_not_and_nesting():
    tree = rule({"operator": "AND", "conditions": [
        cond("code", "any"),
        {"operator": "NOT", "conditions": [{"operator": "OR", "conditions": [
            cond("intent", "summary"), cond("intent", "reasoning")]}]},
    ]})
    assert evaluate_rule(tree, matches(("code", "any", 0.8), ("intent", "chat", 0.5))).matched
    assert evaluate_rule(tree, matches(("code", "any", 0.8), ("intent", "chat", 0.5))).confidence == 0.8
    assert not evaluate_rule(tree, matches(("code", "any", 0.8), ("intent", "summary", 0.9))).matched
    assert not evaluate_rule(tree, matches(("code", "any", 0.8), ("intent", "reasoning", 0.9))).matched
    assert not evaluate_rule(tree, matches(("intent", "chat", 0.5))).matched
    double_not = rule({"operator": "NOT", "conditions": [{"operator": "NOT", "conditions": [cond("intent", "code")]}]})
    assert evaluate_rule(double_not, matches(("intent", "code", 0.4))).matched
    assert not evaluate_rule(double_not, matches(("intent", "chat", 0.4))).matched


def test_not_takes_exactly_one_condition():
    with pytest.raises(ValueError):
        rule({"operator": "NOT", "conditions": [cond("intent", "a"), cond("intent", "b")]})


def decision(name, priority, rules=None, model="qwen-72b"):
    spec = {"name": name, "priority": priority, "modelRefs": [{"model": model}]}
    if rules:
        spec["rules"] = rules
    return Decision.model_validate(spec)


def test_priority_beats_confidence():
    decisions = [decision("low_sure", 1, cond_rule("intent", "code")),
                 decision("high_unsure", 5, cond_rule("keyword", "k"))]
    m = matches(("intent", "code", 0.99), ("keyword", "k", 0.1))
    assert select_decision(decisions, m).decision.name == "high_unsure"


def cond_rule(t, n):
    return {"operator": "AND", "conditions": [cond(t, n)]}


def test_equal_priority_higher_confidence_wins_then_name():
    m = matches(("intent", "code", 0.9), ("keyword", "k", 0.5), ("keyword", "j", 0.9))
    decisions = [decision("b_kw", 5, cond_rule("keyword", "k")), decision("c_code", 5, cond_rule("intent", "code"))]
    assert select_decision(decisions, m).decision.name == "c_code"
    tie = [decision("zeta", 5, cond_rule("intent", "code")), decision("alpha", 5, cond_rule("keyword", "j"))]
    assert [d.decision.name for d in matching_decisions(tie, m)] == ["alpha", "zeta"]
    assert select_decision(list(reversed(tie)), m).decision.name == "alpha"  # order in config is irrelevant


def test_ruleless_decision_matches_everything_with_zero_confidence():
    decisions = [decision("fallback", 0), decision("code", 1, cond_rule("intent", "code"))]
    assert select_decision(decisions, matches(("intent", "code", 0.5))).decision.name == "code"
    chosen = select_decision(decisions, matches(("intent", "chat", 0.5)))
    assert chosen.decision.name == "fallback" and chosen.confidence == 0.0
    assert select_decision([decisions[1]], matches(("intent", "chat", 0.5))) is None


def test_referenced_signal_types_walk_nested_rules():
    decisions = [decision("a", 1, {"operator": "OR", "conditions": [
        cond("intent", "code"), {"operator": "NOT", "conditions": [cond("language", "en")]}]}), decision("b", 0)]
    assert referenced_signal_types(decisions) == {"intent", "language"}


def test_primary_model_is_the_heaviest_model_ref_or_the_fusion_judge():
    d = Decision.model_validate({"name": "d", "modelRefs": [{"model": "a", "weight": 1}, {"model": "b", "weight": 3},
                                                            {"model": "c", "weight": 3}]})
    assert primary_model(d) == "b"
    f = Decision.model_validate({"name": "f", "modelRefs": [{"model": "a"}, {"model": "b"}],
                                 "algorithm": {"type": "fusion", "fusion": {"model": "b"}}})
    assert primary_model(f) == "b"
