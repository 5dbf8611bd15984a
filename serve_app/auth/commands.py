"""``horizon hash-key``: print the SHA-256 digest to put in ``auth.keys[].sha256``.

The key is read from standard input (never a command-line argument, which would land in shell
history and the process list).
"""

from __future__ import annotations

import argparse
import getpass
import sys

from .keys import hash_key


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "Read an API key on stdin and print its sha256 for auth.keys[].sha256."
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Typed keys are not echoed; piped keys are read as one line.
    plain = getpass.getpass("API key: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\r\n")
    if not plain.strip():
        print("no key on stdin", file=sys.stderr)
        return 2
    print(hash_key(plain))
    return 0
