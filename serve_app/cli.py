"""``horizon``: the project's command line.

Each subcommand lives beside the code it drives and registers itself through a small
``register(subparsers)`` function listed in ``_COMMANDS``; this module only dispatches, and it
imports a command's module only when that command runs (keeps ``horizon --help`` fast and
free of Ray/vLLM imports).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# (command name, module that provides ``register(subparsers)``, one-line help)
_COMMANDS: list[tuple[str, str, str]] = [
    ("prepare-models", "deployments.model_assets", "build the local tiny-model checkpoint once (cached)"),
    ("serve", "serve_app.tools.serve", "start a profile on this machine (fast Serve mode) and watch it come up"),
    ("status", "serve_app.tools.status", "deployments, replicas, states and reasons, resources of a running profile"),
    ("stop", "serve_app.tools.stop", "stop what horizon serve started: the app, Ray and its HAProxy; frees the port"),
    ("validate", "serve_app.tools.validate", "validate a profile and print its summary"),
    ("hash-key", "serve_app.auth.commands", "print the sha256 of an API key (read from stdin) for auth.keys"),
    ("plan", "serve_app.tools.plan", "capacity plan of a profile on its cluster; fails on impossible placements"),
    ("kuberay", "serve_app.tools.kuberay", "write the KubeRay RayService manifest generated from a GPU profile"),
    ("route", "serve_app.routing.offline", "route a JSONL file of chat requests in-process; --labels scores it"),
    ("train-router", "serve_app.routing.training", "train the intent head on the templates and training files (CPU, minutes)"),
    ("smoke", "serve_app.tools.smoke", "bring-up checklist per model against a running endpoint; non-zero on failure"),
    ("eval", "serve_app.tools.evaluate", "replay a labelled JSONL set; routing accuracy, success, timeout and fallback rates"),
]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = {name: module for name, module, _ in _COMMANDS}
    if not argv or argv[0] not in modules:
        parser = argparse.ArgumentParser(prog="horizon", description="K2 Horizon operator commands")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        for name, _, help_text in _COMMANDS:
            sub.add_parser(name, help=help_text)
        parser.print_help()
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    # The command's module (and its arguments) are loaded only when that command runs.
    command = argparse.ArgumentParser(prog=f"horizon {argv[0]}")
    importlib.import_module(modules[argv[0]]).register(command)
    args = command.parse_args(argv[1:])
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader left (`horizon plan … | head`): stop quietly, as a shell tool does, and
        # point stdout at nothing so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what the shell reports for such a pipe


if __name__ == "__main__":
    sys.exit(main())
