"""Gateway cost as the fleet grows, and Fusion's cost as the panel grows (issue 18, items 3 and 5).

Three gateway applications on one Ray cluster, deployed side by side so every round measures
each of them under the same conditions: the simulated fleet (zero latency) with 6, 12 and 24
chat models (the five of configs/sim.yaml plus copies of qwen-72b). Per round, in a rotating
order:

- fleet size: p50 at 1 in flight and req/s at 64 in flight of a chat call to one model by alias
  (what a larger fleet adds to every request: the catalogue, health board, admission lines);
- Fusion, on the 24-model application: the looper's total (its own trace) for panels of 2, 3,
  5 and 8 zero-latency members, and one bare hop: a direct deployment-handle call from this
  process to the same zero-latency deployment. The floor of a Fusion request is three
  sequential stages (panel, analysis, synthesis), so the target is total(panel 3) <= 3 x hop.

The tables give the median and min-max over the rounds; the verdict column says whether a row
grows (slope of the medians against the size, compared with the spread) or stays flat.

  .venv/bin/python loadtests/bench_scale.py [--rounds 3] [--seconds 5] [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import load, sim_args, wait_ready  # noqa: E402
from loadtests.lib.rounds import add_rounds_argument, fmt as _fmt, machine as _machine, rotated, stats as _stats  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster, timed_handle_calls  # noqa: E402

SIZES = (6, 12, 24)
PANELS = (2, 3, 5, 8)
BODY = {"model": "qwen-72b", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}


def fleet_args(size: int) -> dict:
    """sim_args() (zero latency) with ``size`` chat models: the five of sim.yaml plus copies."""
    args = sim_args()
    models = [dict(m) for m in args["models"]]
    chat = [m for m in models if m.get("backend") == "simulated"]
    template = next(m for m in chat if m["alias"] == "qwen-72b")
    for m in models:
        if m.get("backend") == "simulated":
            m["placement"] = {**m.get("placement", {}), "num_cpus": 0.01}
    for i in range(size - len(chat)):
        models.append({**template, "alias": f"extra-{i + 1}", "role": "chat",
                       "placement": {**template.get("placement", {}), "num_cpus": 0.01},
                       "description": f"copy {i + 1} of qwen-72b (fleet-size benchmark)"})
    args["models"] = models
    return args


def panel(size: int) -> list[str]:
    members = ["qwen-72b", "coder", "r1-distill", "k2", "minicpm-v"]
    return (members + [f"extra-{i}" for i in range(1, 20)])[:size]


def fusion_body(members: list[str]) -> dict:
    """A Fusion request with this panel and k2 as the judge, as every Fusion benchmark sends it."""
    return {"model": "vllm-sr/fusion", "max_tokens": 16,
            "messages": [{"role": "user", "content": "Compare two sorting algorithms."}],
            "plugins": [{"id": "fusion", "model": "k2", "analysis_models": members}]}


def fusion_traces(http, url: str, members: list[str], requests: int) -> list[dict]:
    """The ``fusion`` trace of ``requests`` Fusion runs with this panel, after 3 warm-up runs;
    each with ``client_ms`` added: the request's time as this client saw it."""
    body = fusion_body(members)
    traces = []
    for i in range(requests + 3):
        start = time.perf_counter()
        r = http.post(f"{url}/v1/chat/completions", json=body)
        r.raise_for_status()
        client_ms = (time.perf_counter() - start) * 1000
        if i >= 3:  # warm-up
            traces.append({**r.json()["fusion"], "client_ms": client_ms})
    return traces


def fusion_totals(url: str, size: int, requests: int) -> list[float]:
    import httpx

    with httpx.Client(timeout=60) as http:
        return [t["timings_ms"]["total"] for t in fusion_traces(http, url, panel(size), requests)]


def bare_hops(app: str, requests: int, idle_s: float = 0.0) -> list[float]:
    from ray import serve

    handle = serve.get_deployment_handle("model-qwen-72b", app_name=app)
    request = {"model": "qwen-72b", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 16}

    return timed_handle_calls(lambda: handle.chat.remote(request), requests, idle_s=idle_s)


def trend(sizes: tuple[int, ...], medians: list[float], spreads: list[float]) -> str:
    """'flat' when the change from the smallest to the largest size is within the rows' spread,
    else 'grows ~x per unit' (least-squares slope of the medians)."""
    change = medians[-1] - medians[0]
    if abs(change) <= max(spreads):
        return "flat (change within the spread)"
    mean_x, mean_y = statistics.mean(sizes), statistics.mean(medians)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, medians))
             / sum((x - mean_x) ** 2 for x in sizes))
    return f"{'grows' if slope > 0 else 'falls'} {slope:+.3f} per unit"


def main() -> int:
    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=40, help="Fusion requests per panel size per round")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "scale.json"))
    args = parser.parse_args()
    rows: list[dict] = []
    with serve_cluster() as port:
        from ray import serve  # after serve_cluster set the fast mode (it checks)

        from serve_app.app import build_app

        urls = {}
        for size in SIZES:
            name = f"fleet{size}"
            serve.run(build_app(fleet_args(size)), name=name, route_prefix=f"/{name}", blocking=False)
            urls[size] = f"http://127.0.0.1:{port}/{name}"
        for url in urls.values():
            wait_ready(url)
        big = f"fleet{max(SIZES)}"
        for rnd in range(1, args.rounds + 1):
            for size in rotated(SIZES, rnd - 1):
                for conc in (1, 64):
                    r = load(f"{urls[size]}/v1/chat/completions", conc, args.seconds, BODY)
                    rows.append({"round": rnd, "kind": "fleet", "size": size, "concurrency": conc, **r})
                    print(f"round {rnd} fleet {size:2d} c={conc:<2d} p50={r['p50_ms']:.2f}ms "
                          f"rps={r['rps']:.0f} errors={r['errors']}", flush=True)
            hops = bare_hops(big, args.requests)
            rows.append({"round": rnd, "kind": "hop", "p50_ms": statistics.median(hops)})
            print(f"round {rnd} bare hop p50={statistics.median(hops):.2f}ms", flush=True)
            for size in rotated(PANELS, rnd - 1):
                totals = fusion_totals(urls[max(SIZES)], size, args.requests)
                rows.append({"round": rnd, "kind": "fusion", "size": size,
                             "total_p50_ms": statistics.median(totals),
                             "total_p95_ms": sorted(totals)[int(0.95 * (len(totals) - 1))]})
                print(f"round {rnd} fusion panel {size} total p50={statistics.median(totals):.2f}ms", flush=True)
    report(args, rows)
    return 0


def report(args, rows: list[dict]) -> None:
    machine = _machine()
    command = "python loadtests/bench_scale.py " + " ".join(sys.argv[1:])
    print(f"\nmachine: {machine['cpus']} CPUs, {machine['cpu']}; command: {command}; "
          f"{args.rounds} rounds, median (min–max)\n")
    print("| chat models | p50 ms at 1 in flight | req/s at 64 in flight |")
    print("|---|---|---|")
    p50s, rpss = [], []
    for size in SIZES:
        p50 = _stats([r["p50_ms"] for r in rows if r["kind"] == "fleet" and r["size"] == size and r["concurrency"] == 1])
        rps = _stats([r["rps"] for r in rows if r["kind"] == "fleet" and r["size"] == size and r["concurrency"] == 64])
        p50s.append(p50)
        rpss.append(rps)
        print(f"| {size} | {_fmt(p50)} | {_fmt(rps, 0)} |")
    verdicts = {
        "fleet_p50": trend(SIZES, [s["median"] for s in p50s], [s["max"] - s["min"] for s in p50s]),
        "fleet_rps": trend(SIZES, [s["median"] for s in rpss], [s["max"] - s["min"] for s in rpss]),
    }
    print(f"\np50: {verdicts['fleet_p50']}; req/s: {verdicts['fleet_rps']}\n")
    hop = _stats([r["p50_ms"] for r in rows if r["kind"] == "hop"])
    print("| Fusion panel | looper total p50 ms | total / bare hop (per round) |")
    print("|---|---|---|")
    totals = []
    ratios_by_panel = {}
    for size in PANELS:
        per_round = [r for r in rows if r["kind"] == "fusion" and r["size"] == size]
        total = _stats([r["total_p50_ms"] for r in per_round])
        hops = {r["round"]: r["p50_ms"] for r in rows if r["kind"] == "hop"}
        ratios = _stats([r["total_p50_ms"] / hops[r["round"]] for r in per_round])
        ratios_by_panel[size] = ratios
        totals.append(total)
        print(f"| {size} | {_fmt(total)} | {_fmt(ratios)} |")
    verdicts["fusion_total"] = trend(PANELS, [t["median"] for t in totals], [t["max"] - t["min"] for t in totals])
    print(f"\nbare hop (direct handle call, zero-latency deployment) p50 {_fmt(hop)} ms; "
          f"panel of 3: total / hop {_fmt(ratios_by_panel[3])} (target <= 3); "
          f"panel growth: {verdicts['fusion_total']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine, "command": command, "rounds": args.rounds,
                                          "rows": rows, "verdicts": verdicts,
                                          "fusion_ratio_panel3": ratios_by_panel[3]}, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
