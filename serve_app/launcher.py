"""``horizon serve``: start a profile with Ray Serve in its fast mode.

Ray Serve reads ``RAY_SERVE_THROUGHPUT_OPTIMIZED`` and ``RAY_SERVE_ENABLE_HA_PROXY`` when the
controller and proxy start, so they must be in the environment before Ray does; this command
sets them (unless the operator already set them, e.g. to 0) and runs ``serve run``. Plain
``serve run configs/X.yaml`` works too, in Serve's default mode unless those are exported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from serve_app.config.loader import ConfigError, load_config

FAST_MODE_ENV = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1"}


def serve_env(base: dict[str, str] | None = None, fast: bool = True) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if fast:
        for key, value in FAST_MODE_ENV.items():
            env.setdefault(key, value)
    # Model hubs are unreachable from these machines; never let a library try.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", default="configs/local.yaml", help="profile YAML")
    parser.add_argument("--no-fast", action="store_true", help="use Ray Serve's default proxy mode")
    parser.add_argument("--non-blocking", action="store_true", help="return once the app is running")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    if any(m.backend == "vllm" and str(m.engine.model).startswith("local:") for m in cfg.models):
        from deployments.model_assets import build_smollm2

        build_smollm2()
    serve_bin = shutil.which("serve") or os.path.join(os.path.dirname(sys.executable), "serve")
    argv = [serve_bin, "run", args.config]
    if args.non_blocking:
        argv.append("--non-blocking")
    os.execve(serve_bin, argv, serve_env(fast=not args.no_fast))
    return 0  # not reached
