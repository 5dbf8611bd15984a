"""A benchmark's own handle calls (the bare hop, the direct stream) must run in the mode of the
cluster they are compared with: Serve reads its mode when ray.serve is first imported, so
serve_cluster() refuses to start once an earlier import fixed the default mode."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import ray.serve  # too early: the fast-mode environment is not set yet
from loadtests.lib.serve_cluster import serve_cluster
try:
    with serve_cluster():
        print("STARTED")
except RuntimeError as exc:
    print("REFUSED", exc)
import ray
print("RAY_UP", ray.is_initialized())
"""


def test_an_earlier_ray_serve_import_is_refused_before_ray_starts():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(ROOT))], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "STARTED" not in out.stdout
    assert "REFUSED ray.serve was imported before serve_cluster()" in out.stdout
    assert "RAY_UP False" in out.stdout


def test_the_benchmarks_that_call_handles_import_serve_late():
    """Importing a benchmark module must leave ray.serve unimported, or its serve_cluster()
    would refuse (and before the guard, silently measured the default mode)."""
    # Every benchmark that starts Ray Serve itself, found by what it calls: a new one is covered.
    modules = sorted(p.stem for p in (ROOT / "loadtests").glob("*.py")
                     if "serve_cluster(" in p.read_text() or "from ray import serve" in p.read_text())
    assert {"bench_fusion_ray", "bench_scale", "bench_autoscaling"} <= set(modules)
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              + "".join(f"import loadtests.{m}\n" for m in modules)
              + "print(sorted(m for m in sys.modules if m.startswith('ray.serve')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
