"""What the ingress replica's memory growth under steady load is made of (issue 18, the soak).

The memory benchmark's soak (``bench_memory.py --soak-seconds 600``) saw the ingress's PSS rise
and fall back in a sawtooth rather than climb. This probe looks inside the ingress replica while
the simulated gateway serves a steady, low request rate (like the soak's few requests a second),
through ``__ray_call__`` on the replica's actor:
- every ``--sample-s``: the process's PSS, and the cyclic collector's counters (collections per
  generation, pending allocations), so a fall in PSS can be matched with a collection or not;
- ``tracemalloc`` started after ``--warmup-s``: how much of the growth is Python objects that
  are still alive, and which lines allocated them (the top rows by size), against the PSS
  growth over the same interval (the rest is native memory: Ray's core worker, gRPC, the
  allocator).
It is a diagnostic, not a target: one run, no rounds; the JSON lands under loadtests/results/.

  .venv/bin/python loadtests/probe_ingress_memory.py [--seconds 400] [--rate 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import sim_args, wait_ready  # noqa: E402
from loadtests.lib.rounds import machine  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402

# A chat turn like the soak's: a prompt of a few hundred characters, 64 tokens back.
PROMPT = "Tell me about sorting algorithms. " * 12


# The functions below run inside the ingress replica (``actor.__ray_call__``; the first argument
# is the replica's actor instance, unused).
def _sample(_actor) -> dict:
    import gc
    import os
    import tracemalloc

    with open(f"/proc/{os.getpid()}/smaps_rollup") as f:
        pss_kib = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    return {"pss_mib": round(pss_kib / 1024, 2),
            "gc_collections": [s["collections"] for s in gc.get_stats()],
            "gc_pending": list(gc.get_count()),
            "traced_mib": round(tracemalloc.get_traced_memory()[0] / 2**20, 3)
            if tracemalloc.is_tracing() else None}


def _trace_start(_actor) -> None:
    import tracemalloc

    tracemalloc.start(8)
    _actor._horizon_probe_snapshot = tracemalloc.take_snapshot()


def _trace_top(_actor, rows: int) -> list[dict]:
    import tracemalloc

    later = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    top = later.compare_to(_actor._horizon_probe_snapshot, "lineno")[:rows]
    tracemalloc.stop()
    return [{"kib": round(s.size_diff / 1024, 1), "objects": s.count_diff,
             "where": str(s.traceback).split("site-packages/")[-1]} for s in top]


def drive(url: str, rate: float, stop: threading.Event, sent: list[int]) -> None:
    """Half the requests streamed, half not, ``rate`` a second in all (two paced clients)."""
    import httpx

    def client(stream: bool) -> None:
        body = {"model": "qwen-72b", "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": 64, "stream": stream}
        with httpx.Client(timeout=30) as http:
            due = time.perf_counter()
            while not stop.is_set():
                if stream:
                    with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                        for _ in r.iter_lines():
                            pass
                else:
                    http.post(f"{url}/v1/chat/completions", json=body).raise_for_status()
                sent[0] += 1
                due += 2 / rate
                time.sleep(max(0.0, due - time.perf_counter()))

    threads = [threading.Thread(target=client, args=(s,), daemon=True) for s in (False, True)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=400.0)
    parser.add_argument("--rate", type=float, default=4.0, help="requests a second")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=30.0, help="before tracemalloc starts")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "ingress-memory-probe.json"))
    args = parser.parse_args()
    with serve_cluster() as port:
        import ray
        from ray import serve
        from ray.serve.context import _get_global_client

        from serve_app.app import build_app

        serve.run(build_app(sim_args()), name="horizon", route_prefix="/horizon")
        url = f"http://127.0.0.1:{port}/horizon"
        wait_ready(url)
        details = _get_global_client().get_serve_details()
        [replica] = details["applications"]["horizon"]["deployments"]["ingress"]["replicas"]
        ingress = ray.get_actor(replica["actor_name"], namespace="serve")

        def call(fn, *a):
            return ray.get(ingress.__ray_call__.remote(fn, *a))

        stop, sent = threading.Event(), [0]
        driver = threading.Thread(target=drive, args=(url, args.rate, stop, sent), daemon=True)
        start = time.perf_counter()
        driver.start()
        samples, traced_from = [], None
        while (elapsed := time.perf_counter() - start) < args.seconds:
            if traced_from is None and elapsed >= args.warmup_s:
                call(_trace_start)
                traced_from = {"elapsed_s": round(elapsed, 1), "requests": sent[0], **call(_sample)}
            samples.append({"elapsed_s": round(elapsed, 1), "requests": sent[0], **call(_sample)})
            print(json.dumps(samples[-1]), flush=True)
            time.sleep(args.sample_s)
        final = {"elapsed_s": round(time.perf_counter() - start, 1), "requests": sent[0], **call(_sample)}
        top = call(_trace_top, 12)
        stop.set()
        driver.join()

    traced_requests = final["requests"] - traced_from["requests"]
    drops = [{"at_s": b["elapsed_s"], "pss_drop_mib": round(a["pss_mib"] - b["pss_mib"], 2),
              "gc_collections_during": [y - x for x, y in zip(a["gc_collections"], b["gc_collections"])]}
             for a, b in zip(samples, samples[1:]) if a["pss_mib"] - b["pss_mib"] >= 1.0]
    summary = {
        "requests_while_traced": traced_requests,
        "pss_growth_while_traced_mib": round(final["pss_mib"] - traced_from["pss_mib"], 2),
        "python_growth_while_traced_mib": round(final["traced_mib"] - traced_from["traced_mib"], 3),
        "pss_drops_of_1_mib_or_more": drops,
    }
    doc = {"issue": 18, "machine": machine(),
           "command": "loadtests/probe_ingress_memory.py " + " ".join(sys.argv[1:]),
           "settings": vars(args), "summary": summary, "top_python_growth": top, "samples": samples + [final]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(json.dumps(summary, indent=1))
    print("\n| KiB | objects | allocated at |\n|---|---|---|")
    for row in top:
        print(f"| {row['kib']} | {row['objects']} | `{row['where']}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
