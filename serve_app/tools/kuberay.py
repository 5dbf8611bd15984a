"""``horizon kuberay --config PROFILE [--output PATH] [--check]``: write the KubeRay RayService
manifest of a GPU profile (serve_app.capacity.kuberay builds it).

The profile is checked as ``horizon validate`` checks it before anything is written: the Serve
config around it (a port Serve could not bind, a key Serve would ignore: the manifest carries the
file verbatim to a cluster, where the failure would come only after the pods are up) and its
placement. An impossible profile writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serve_app.capacity.errors import PlacementError
from serve_app.capacity.kuberay import DEFAULT_OUTPUT, manifest_text
from serve_app.capacity.planner import check_placement
from serve_app.config.loader import ConfigError

from .local_cluster import CLUSTER_SERVE_ENV
from .serve_config import read_serve_profile


def render_manifest(config_path: str) -> str:
    """The manifest text for a profile file; raises ConfigError / PlacementError / ValueError."""
    document, cfg = read_serve_profile(config_path)
    check_placement(cfg)
    return manifest_text(document, cfg, config_path, serve_env=CLUSTER_SERVE_ENV)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="GPU profile, e.g. configs/fleet.yaml")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help=f"manifest path (default {DEFAULT_OUTPUT})")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the manifest at --output is out of date")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        text = render_manifest(args.config)
    except (ConfigError, PlacementError, ValueError) as exc:  # FactsError is a ConfigError
        print(f"horizon kuberay: {exc}", file=sys.stderr)
        return 1
    out = Path(args.output)
    try:
        if args.check:
            current = out.read_text(encoding="utf-8") if out.exists() else None
            if current != text:
                print(f"horizon kuberay: {out} is out of date; run horizon kuberay --config {args.config}",
                      file=sys.stderr)
                return 1
            print(f"{out} is up to date")
            return 0
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not text
        print(f"horizon kuberay: cannot {'read' if args.check else 'write'} {out}: "
              f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0
