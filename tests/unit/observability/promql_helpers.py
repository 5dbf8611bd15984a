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
    return set(_names(parse(expr)))


def _names(node: promql.Expr) -> Iterator[str]:
    if isinstance(node, promql.VectorSelector):
        if node.name:
            yield node.name
    elif isinstance(node, promql.MatrixSelector):
        yield from _names(node.vector_selector)
    elif isinstance(node, promql.BinaryExpr):
        yield from _names(node.lhs)
        yield from _names(node.rhs)
    elif isinstance(node, promql.AggregateExpr):
        yield from _names(node.expr)
        if node.param is not None:
            yield from _names(node.param)
    elif isinstance(node, promql.Call):
        for arg in node.args:
            yield from _names(arg)
    elif isinstance(node, (promql.ParenExpr, promql.UnaryExpr, promql.SubqueryExpr)):
        yield from _names(node.expr)
