"""PromQL as Prometheus reads it (promql-parser, the Prometheus grammar in Rust), for the tests
of what cluster/ queries: a syntax error fails here instead of in Grafana or the rule loader."""

from __future__ import annotations

import re
from typing import Iterator

import promql_parser as promql

# Grafana's interval variables stand for a duration; the others sit inside label matchers.
_GRAFANA_DURATIONS = re.compile(r"\$\{?__(rate_interval|interval|range)\}?")


def parse(expr: str) -> promql.Expr:
    """The expression's syntax tree; ValueError naming the problem when Prometheus would refuse it."""
    return promql.parse(_GRAFANA_DURATIONS.sub("5m", expr))


def series(expr: str) -> set[str]:
    """Metric names the expression selects."""
    return {selector.name for selector in selectors(expr) if selector.name}


def selectors(expr: str) -> list[promql.VectorSelector]:
    """Every series selector of the expression (its name and label matchers)."""
    return list(_selectors(parse(expr)))


def accepts(matcher: promql.Matcher, value: str) -> bool:
    """Whether a label matcher selects a series whose label has ``value`` (Prometheus anchors
    regular expressions at both ends)."""
    if matcher.op == promql.MatchOp.Equal:
        return value == matcher.value
    if matcher.op == promql.MatchOp.NotEqual:
        return value != matcher.value
    found = re.fullmatch(matcher.value, value) is not None
    return found if matcher.op == promql.MatchOp.Re else not found


def _selectors(node: promql.Expr) -> Iterator[promql.VectorSelector]:
    if isinstance(node, promql.VectorSelector):
        yield node
    elif isinstance(node, promql.MatrixSelector):
        yield from _selectors(node.vector_selector)
    elif isinstance(node, promql.BinaryExpr):
        yield from _selectors(node.lhs)
        yield from _selectors(node.rhs)
    elif isinstance(node, promql.AggregateExpr):
        yield from _selectors(node.expr)
        if node.param is not None:
            yield from _selectors(node.param)
    elif isinstance(node, promql.Call):
        for arg in node.args:
            yield from _selectors(arg)
    elif isinstance(node, (promql.ParenExpr, promql.UnaryExpr, promql.SubqueryExpr)):
        yield from _selectors(node.expr)
