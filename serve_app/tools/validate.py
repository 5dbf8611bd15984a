"""``horizon validate``: load a profile, print what it will deploy, and check it fits.

A profile without a ``cluster`` section runs on this machine: it must fit what Ray will detect
here (:mod:`serve_app.capacity.machine`). A GPU profile is checked by ``horizon plan``.
"""

from __future__ import annotations

import argparse
import sys

from serve_app.capacity.machine import report_machine_fit
from serve_app.config.loader import ConfigError

from .serve_config import load_serve_profile


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="profile YAML, e.g. configs/local.yaml")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_serve_profile(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"profile {cfg.profile}: {len(cfg.models)} models, {len(cfg.routing.decisions)} decisions")
    for m in cfg.models:
        engine = f"shares {m.shares_engine_with}" if m.shares_engine_with else m.engine.model
        print(f"  {m.alias:<12} {m.role:<12} {m.backend:<10} {engine}")
    for u in cfg.unavailable_models:
        print(f"  {u.alias:<12} {u.role:<12} {'unavailable':<10} {u.reason}")
    return report_machine_fit(cfg, args.config)
