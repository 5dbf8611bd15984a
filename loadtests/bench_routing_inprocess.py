"""In-process routing benchmark: decisions/s and latency of ``Router.route`` with the real
embedding model, no Ray (the same path as ``horizon route``).

Rows (the variants):
- ``1 in flight``: one request at a time; p50 is the per-decision latency including the embedding.
- ``1 in flight, embedding precomputed``: the same with every embedding computed beforehand, so
  the row is the router's own cost (signals, index lookup, rule trees, selection).
- ``N in flight, unbatched``: N concurrent routes, each embedding its own text (the encoder runs
  one call at a time, so this shows the cost of not batching).
- ``N in flight, batched``: the same with a micro-batching embedder that merges concurrent
  texts into one forward pass within ``--batch-wait-ms`` (what ``@serve.batch`` does in the
  embedding deployment).

How (issue 18): the routers are built and warmed once; then ``--rounds`` rounds (>= 3, default 3)
each run every row once, the rows' order rotating by one from round to round, so a slow spell of
a shared machine falls on different rows. The table gives each row's median (min–max) over the
rounds, for every concurrency level run; batched vs unbatched is compared per round (decisions/s
ratio per round -> median (min–max)), and a difference whose min–max ranges overlap is written as
"no measurable difference". The machine, the exact command and every round's rows go to
``--out`` (default ``loadtests/results/routing_inprocess.json``). To keep a 3-round run within a
few minutes on 2 cores, a row is 100 decisions per round (it was 200 in a single pass).

Run: ``python loadtests/bench_routing_inprocess.py --config configs/sim.yaml [--rounds 3]
[--requests 100] [--concurrency 8 32]`` (requests come from the evaluation set, cycled).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.lib.rounds import add_rounds_argument, differs, fmt, machine, rotated, stats  # noqa: E402
from serve_app.config.loader import load_config  # noqa: E402
from serve_app.routing import Router  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "routing_inprocess.json"
class MicroBatchingEmbedder:
    """Merges embed() calls that arrive within ``wait_s`` into one encoder call."""

    def __init__(self, encoder, wait_s: float, max_batch: int):
        self._encoder = encoder
        self._wait_s = wait_s
        self._max_batch = max_batch
        self._pending: list[tuple[list[str], asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self.batches: list[int] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((list(texts), future))
        if sum(len(t) for t, _ in self._pending) >= self._max_batch:
            await self._flush()
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later())
        return await future

    async def _flush_later(self) -> None:
        await asyncio.sleep(self._wait_s)
        await self._flush()

    async def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        flat = [t for texts, _ in pending for t in texts]
        self.batches.append(len(flat))
        try:
            vectors = await asyncio.to_thread(self._encoder.encode, flat)
        except Exception as exc:  # every waiter sees the failure
            for _, future in pending:
                future.set_exception(exc)
            return
        i = 0
        for texts, future in pending:
            future.set_result(np.asarray(vectors[i:i + len(texts)]).tolist())
            i += len(texts)


class PrecomputedEmbedder:
    """Answers from vectors computed beforehand: isolates the router's own cost (signals, index
    lookup, rule trees, selection) from the encoder's."""

    def __init__(self, encoder):
        self._encoder = encoder
        self._cache: dict[str, list[float]] = {}

    def warm(self, texts: list[str]) -> None:
        for text, vector in zip(texts, self._encoder.encode(texts)):
            self._cache[text] = np.asarray(vector).tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self._cache]
        if missing:
            self.warm(missing)
        return [self._cache[t] for t in texts]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_level(router: Router, requests: list[dict], total: int, concurrency: int) -> dict:
    latencies: list[float] = []
    queue = [requests[i % len(requests)] for i in range(total)]

    async def worker() -> None:
        while queue:
            body = queue.pop()
            start = time.perf_counter()
            await router.route(body)
            latencies.append((time.perf_counter() - start) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"rate": total / elapsed, "p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95),
            "mean": statistics.fmean(latencies)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/sim.yaml")
    parser.add_argument("--input", default="configs/eval/routing_eval.jsonl")
    parser.add_argument("--requests", type=int, default=100, help="decisions per row per round")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--batch-wait-ms", type=float, default=2.0)
    parser.add_argument("--max-batch", type=int, default=64)
    add_rounds_argument(parser, help="rounds over every row (>= 3)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON goes")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch intra-op threads for the encoder (0 = torch's default); on a small "
                             "shared box 1 avoids oversubscription")
    args = parser.parse_args(argv)
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    from deployments.embedding import LocalEmbeddingClient, load_encoder

    cfg = load_config(args.config)
    encoder = load_encoder(cfg.embedding_model)
    requests = [{"messages": json.loads(line)["messages"]}
                for line in Path(args.input).read_text().splitlines() if line.strip()]

    async def bench() -> list[dict]:
        plain = Router(cfg, LocalEmbeddingClient(encoder), None)
        await plain.start()
        await run_level(plain, requests, 20, 1)  # warm-up
        precomputed = PrecomputedEmbedder(encoder)
        router_only = Router(cfg, precomputed, None)
        await router_only.start()
        await run_level(router_only, requests, len(requests), 1)  # fills the cache
        batching = MicroBatchingEmbedder(encoder, args.batch_wait_ms / 1000, args.max_batch)
        batched = Router(cfg, batching, None)
        await batched.start()
        await run_level(batched, requests, 20, max(args.concurrency))  # warm-up
        variants = [("1 in flight", plain, 1, None),
                    ("1 in flight, embedding precomputed (router cost only)", router_only, 1, None)]
        variants += [(f"{n} in flight, unbatched", plain, n, None) for n in args.concurrency]
        variants += [(f"{n} in flight, batched", batched, n, batching) for n in args.concurrency]
        rounds = []
        for r in range(args.rounds):
            order = rotated(variants, r)
            rows = {}
            for name, router, n, batcher in order:
                if batcher is not None:
                    batcher.batches.clear()
                row = await run_level(router, requests, args.requests, n)
                row["concurrency"] = n
                row["batch"] = (statistics.fmean(batcher.batches) if batcher and batcher.batches
                                else 1.0)
                rows[name] = row
            rounds.append({"round": r + 1, "order": [v[0] for v in order],
                           "rows": {v[0]: rows[v[0]] for v in variants}})
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        return rounds

    rounds = asyncio.run(bench())
    import torch

    names = list(rounds[0]["rows"])
    summary = {name: {key: stats([rnd["rows"][name][key] for rnd in rounds])
                      for key in ("rate", "p50", "p95", "mean", "batch")} | {
                          "concurrency": rounds[0]["rows"][name]["concurrency"]}
               for name in names}
    comparisons = []
    for n in args.concurrency:
        unb, bat = f"{n} in flight, unbatched", f"{n} in flight, batched"
        ratios = [rnd["rows"][bat]["rate"] / rnd["rows"][unb]["rate"] for rnd in rounds]
        measurable = differs(summary[bat]["rate"], summary[unb]["rate"])
        if not measurable:
            verdict = "no measurable difference"
        elif summary[bat]["rate"]["median"] > summary[unb]["rate"]["median"]:
            verdict = "batched is faster"
        else:
            verdict = "batched is slower"
        comparisons.append({"concurrency": n, "compare": "batched / unbatched decisions/s",
                            "ratio_per_round": ratios, "ratio": stats(ratios),
                            "measurable": measurable, "verdict": verdict})

    info = machine()
    command = shlex.join(["python", "loadtests/bench_routing_inprocess.py", *argv])
    print(f"profile {cfg.profile}, embedding {cfg.embedding_model.engine.model}, {args.requests} decisions per "
          f"row per round, {args.rounds} rounds (order rotating), torch threads {torch.get_num_threads()}, "
          f"escalations not classified (no k2); median (min–max) over the rounds")
    print(f"machine: {info['cpus']} CPUs, {info['cpu']}; command: `{command}`")
    print()
    print("| load | in flight | decisions/s | p50 ms | p95 ms | mean batch |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        s = summary[name]
        print(f"| {name} | {s['concurrency']} | {fmt(s['rate'], 1)} | {fmt(s['p50'], 1)} | {fmt(s['p95'], 1)} | "
              f"{s['batch']['median']:.1f} |")
    print()
    for c in comparisons:
        per_round = ", ".join(f"{x:.2f}" for x in c["ratio_per_round"])
        print(f"{c['concurrency']} in flight, batched / unbatched decisions/s: per round {per_round} -> "
              f"{fmt(c['ratio'])}x: {c['verdict']}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "routing_inprocess", "machine": info, "command": command,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "profile": cfg.profile, "embedding": str(cfg.embedding_model.engine.model),
        "torch_threads": torch.get_num_threads(), "rounds": rounds, "summary": summary,
        "comparisons": comparisons}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
