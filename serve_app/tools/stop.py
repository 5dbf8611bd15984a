"""``horizon stop``: stop what ``horizon serve`` started, and only that.

With a ``horizon serve`` still running in a terminal, it is asked to stop (SIGINT, as Ctrl-C) and
does its own clean shutdown; a run started with ``--non-blocking`` (or one whose process died)
is stopped from here: the Ray cluster it started and Ray's HAProxy (on a cluster it joined,
only its application). It waits until the HTTP port is free. With nothing running it says so
and exits 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from . import local_cluster as lc
from ..config.arguments import positive_number
from .serve import say, shutdown


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=positive_number, default=120.0, metavar="S",
                        help="seconds to wait for a running horizon serve to stop (default 120)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state = lc.ServeState.load()
    if state is None:
        say("nothing to stop: no horizon serve is running on this machine")
        return 0
    if state.pid and lc.pid_alive(state.pid) and state.pid != os.getpid():
        say(f"asking horizon serve (pid {state.pid}) to stop ...")
        os.kill(state.pid, signal.SIGINT)
        deadline = time.monotonic() + args.timeout
        while lc.pid_alive(state.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if lc.pid_alive(state.pid):
            print(f"horizon stop: pid {state.pid} did not stop within {args.timeout:.0f} s; stopping "
                  f"its cluster from here", file=sys.stderr)
        elif lc.ServeState.load() is None and not lc.port_in_use(state.host, state.port):
            say(f"stopped; port {state.port} is free")
            return 0
    # Also when Ray's GCS is gone already: shutdown then asks it nothing and stops what the
    # session left (the raylet stops a minute after its GCS, Ray's agents and each vLLM engine
    # core do not), a stray HAProxy holding the port, and Ray's record of the cluster.
    shutdown(state)
    return 0 if not lc.port_in_use(state.host, state.port) else 1
