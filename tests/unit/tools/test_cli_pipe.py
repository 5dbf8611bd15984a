"""A command whose reader goes away (`horizon plan … | head`) stops quietly, as shell tools do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_a_reader_that_leaves_is_exit_141_without_a_traceback():
    # The read end is closed before the command (a second of imports) writes its table.
    child = subprocess.Popen([sys.executable, "-m", "serve_app.cli", "plan", "configs/fleet.yaml"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=60) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
