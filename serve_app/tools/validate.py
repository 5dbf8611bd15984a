"""``horizon validate``: load a profile, print what it will deploy, and check it fits.

Every profile gets the placement checks the app builder runs at ``serve run`` (a model that
cannot be placed, a facts file that cannot be read), so a profile validate passes does not then
fail to build. A profile without a ``cluster`` section runs on this machine: it must also fit
what Ray will detect here (:mod:`serve_app.capacity.machine`). ``horizon plan`` prints a GPU
profile's capacity table.
"""

from __future__ import annotations

import argparse
import sys

from serve_app.capacity.errors import PlacementError
from serve_app.capacity.machine import report_machine_fit
from serve_app.capacity.planner import check_placement
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
    try:
        check_placement(cfg)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    except PlacementError as exc:
        print(f"{args.config}: impossible placement: {exc} (see horizon plan {args.config})", file=sys.stderr)
        return 1
    return report_machine_fit(cfg, args.config)
