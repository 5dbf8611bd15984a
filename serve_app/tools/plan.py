"""``horizon plan CONFIG [--context N] [--qps alias=N ...] [--tokens alias=N ...] [--latency alias=S ...]``:
the capacity planner's table.

Exits 1 when any placement is impossible (the same checks ``serve run`` applies) or the
profile does not load. The profile loads as ``horizon validate`` loads it: the Serve config
around the Horizon settings is checked too (a port Serve could not bind is named here, not
after Ray has started), and the plan is of what the profile serves.
"""

from __future__ import annotations

import argparse
import sys

from serve_app.capacity.facts import ModelFacts, load_model_facts
from serve_app.capacity.machine import report_machine_fit
from serve_app.capacity.planner import facts_for, plan
from serve_app.capacity.report import render
from serve_app.config.arguments import positive_number, whole_number
from serve_app.config.loader import ConfigError

from .serve_config import load_serve_profile


def _per_alias(what: str, number):
    """``ALIAS=N`` with N read by ``number`` (nan, inf and <= 0 would plan nothing)."""
    def parse(value: str) -> tuple[str, float]:
        alias, sep, text = value.partition("=")
        if not sep or not alias:
            raise argparse.ArgumentTypeError(f"expected alias={what}, got {value!r}")
        return alias, number(text)
    return parse


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="profile YAML, e.g. configs/fleet.yaml")
    parser.add_argument("--context", type=whole_number(1), default=None, metavar="N",
                        help="context tokens per sequence (default: each model's max_model_len)")
    parser.add_argument("--qps", type=_per_alias("QPS", positive_number), action="append", default=[],
                        metavar="ALIAS=N", help="target requests per second for a model (repeatable)")
    parser.add_argument("--tokens", type=_per_alias("TOKENS", whole_number(1)), action="append", default=[],
                        metavar="ALIAS=N", help="prompt + completion tokens a request keeps in the KV cache "
                                                "(default: the facts file's average; repeatable)")
    parser.add_argument("--latency", type=_per_alias("SECONDS", positive_number), action="append", default=[],
                        metavar="ALIAS=S", help="mean seconds a request may take: a note when the measured "
                                                "latency is above it (repeatable)")
    parser.add_argument("--facts", default=None, help="model facts YAML (default: the profile's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_serve_profile(args.config)
        facts = load_model_facts(args.facts) if args.facts else facts_for(cfg)
    except ConfigError as exc:  # FactsError is one
        print(exc, file=sys.stderr)
        return 1
    if facts is None:
        facts = ModelFacts()
    try:
        report = plan(cfg, facts, context_tokens=args.context, target_qps=dict(args.qps),
                      tokens_per_request=dict(args.tokens), target_latency_s=dict(args.latency))
    except ValueError as exc:
        print(f"horizon plan: {exc}", file=sys.stderr)
        return 1
    print(render(report))
    if report.errors:
        print(f"horizon plan: {len(report.errors)} impossible placement(s); first: {report.errors[0]}",
              file=sys.stderr)
        return 1
    return report_machine_fit(cfg, args.config)
