"""``horizon plan CONFIG [--context N] [--qps alias=N ...]``: the capacity planner's table.

Exits 1 when any placement is impossible (the same checks ``serve run`` applies) or the
profile does not load.
"""

from __future__ import annotations

import argparse
import sys

from serve_app.config.loader import ConfigError, load_config
from serve_app.config.arguments import positive_number, whole_number

from .facts import ModelFacts, load_model_facts
from .machine import report_machine_fit
from .planner import facts_for, plan
from .report import render


def _qps(value: str) -> tuple[str, float]:
    alias, sep, number = value.partition("=")
    if not sep or not alias:
        raise argparse.ArgumentTypeError(f"expected alias=QPS, got {value!r}")
    # A rate the replica arithmetic can divide by: nan, inf and <= 0 would plan nothing.
    return alias, positive_number(number)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="profile YAML, e.g. configs/fleet.yaml")
    parser.add_argument("--context", type=whole_number(1), default=None, metavar="N",
                        help="context tokens per sequence (default: each model's max_model_len)")
    parser.add_argument("--qps", type=_qps, action="append", default=[], metavar="ALIAS=N",
                        help="target requests per second for a model (repeatable)")
    parser.add_argument("--facts", default=None, help="model facts YAML (default: the profile's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
        facts = load_model_facts(args.facts) if args.facts else facts_for(cfg)
    except ConfigError as exc:  # FactsError is one
        print(exc, file=sys.stderr)
        return 1
    if facts is None:
        facts = ModelFacts()
    try:
        report = plan(cfg, facts, context_tokens=args.context, target_qps=dict(args.qps))
    except ValueError as exc:
        print(f"horizon plan: {exc}", file=sys.stderr)
        return 1
    print(render(report))
    if report.errors:
        print(f"horizon plan: {len(report.errors)} impossible placement(s); first: {report.errors[0]}",
              file=sys.stderr)
        return 1
    return report_machine_fit(cfg, args.config)
