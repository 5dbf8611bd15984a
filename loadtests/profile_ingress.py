"""Where the ingress spends its time under load: py-spy on the ingress replica.

Deploys the zero-latency simulated fleet (as ``bench_gateway.py`` does), drives ``--concurrency``
closed-loop requests at the ingress for ``--seconds``, and samples the ingress replica's process
with py-spy meanwhile. Prints the functions with the most samples (self and total), and writes the
raw collapsed stacks under ``loadtests/results/`` for a flame graph (published ones are gzipped).

  .venv/bin/python loadtests/profile_ingress.py [--concurrency 16] [--seconds 12] [--no-access-log]
      [--fusion-panel 3]   (Fusion requests instead of plain chat ones)
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_fusion_ray import PANELS as FUSION_PANELS  # noqa: E402
from loadtests.bench_gateway import BODY, load, sim_args, wait_ready  # noqa: E402
from loadtests.bench_scale import fusion_body  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402


def ingress_pid(app: str) -> int:
    """The replica's process, by the title Ray gives it (no dashboard needed)."""
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        if f"ServeReplica:{app}:ingress" in " ".join(proc.info.get("cmdline") or []):
            return proc.info["pid"]
    raise LookupError("no ingress replica")


def summarize(raw: str, top: int) -> dict:
    self_counts: collections.Counter = collections.Counter()
    total_counts: collections.Counter = collections.Counter()
    samples = 0
    access_log = 0   # Serve's per-request access log line (Replica._record_errors_and_metrics)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        samples += n
        frames = stack.split(";")
        if "_record_errors_and_metrics" in stack and "logging/__init__.py" in stack:
            access_log += n
        self_counts[frames[-1]] += n
        for frame in set(frames):
            total_counts[frame] += n
    return {"samples": samples, "access_log_share": access_log / samples if samples else 0.0,
            "self": [(f, c / samples) for f, c in self_counts.most_common(top)],
            "total": [(f, c / samples) for f, c in total_counts.most_common(top)]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--label", default="profile")
    parser.add_argument("--fusion-panel", type=int, default=0, choices=(0, *FUSION_PANELS),
                        help="send Fusion requests with a panel of this size (bench_fusion_ray.py's "
                             "members, judge k2) instead of plain chat requests (0)")
    parser.add_argument("--no-access-log", action="store_true",
                        help="deploy with observability.access_log: false (Serve's per-request log line off)")
    args = parser.parse_args()
    out_dir = ROOT / "loadtests" / "results"
    with serve_cluster() as port:
        from ray import serve

        from serve_app.app import build_app

        app_args = sim_args()
        if args.no_access_log:
            app_args["observability"] = {**app_args.get("observability", {}), "access_log": False}
        serve.run(build_app(app_args), name="horizon", route_prefix="/horizon")
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)
        body = fusion_body(FUSION_PANELS[args.fusion_panel]) if args.fusion_panel else BODY
        load(f"{url}/v1/chat/completions", args.concurrency, 3, body)      # warm-up
        pid = ingress_pid("horizon")
        raw_path = out_dir / f"ingress-{args.label}.collapsed.txt"
        result: dict = {}
        loader = threading.Thread(target=lambda: result.update(
            load(f"{url}/v1/chat/completions", args.concurrency, args.seconds, body)))
        loader.start()
        time.sleep(1)
        subprocess.run([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid),
                        "--duration", str(int(args.seconds - 2)), "--format", "raw", "--rate", "200",
                        "--nonblocking", "-o", str(raw_path)], check=True, capture_output=True)
        loader.join()
    report = summarize(raw_path.read_text(), args.top)
    print(f"load: {result.get('rps', 0):.0f} req/s, p50 {result.get('p50_ms', 0):.2f} ms at "
          f"{args.concurrency} in flight; {report['samples']} samples of the ingress replica; "
          f"Serve's access log line {report['access_log_share']:.1%} of them")
    for kind in ("total", "self"):
        print(f"\n{kind}:")
        for frame, share in report[kind]:
            print(f"  {share:6.1%}  {frame[:150]}")
    command = " ".join(["python", *sys.argv])
    (out_dir / f"ingress-{args.label}.json").write_text(
        json.dumps({"command": command, "load": result, **report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
