"""In-process routing benchmark: decisions/s and latency of ``Router.route`` with the real
embedding model, no Ray (the same path as ``horizon route``).

Rows:
- ``1 in flight``: one request at a time; p50 is the per-decision latency including the embedding.
- ``N in flight, unbatched``: N concurrent routes, each embedding its own text (the encoder runs
  one call at a time, so this shows the cost of not batching).
- ``N in flight, batched``: the same with a micro-batching embedder that merges concurrent
  texts into one forward pass within ``--batch-wait-ms`` (what ``@serve.batch`` does in the
  embedding deployment).

Run: ``python loadtests/bench_routing_inprocess.py --config configs/sim.yaml``
(prints a markdown table; requests come from the evaluation set, cycled).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from serve_app.config.loader import load_config  # noqa: E402
from serve_app.routing import Router  # noqa: E402


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
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/sim.yaml")
    parser.add_argument("--input", default="configs/eval/routing_eval.jsonl")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--batch-wait-ms", type=float, default=2.0)
    parser.add_argument("--max-batch", type=int, default=64)
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

    async def bench() -> list[tuple[str, dict]]:
        rows = []
        plain = Router(cfg, LocalEmbeddingClient(encoder), None)
        await plain.start()
        await run_level(plain, requests, 20, 1)  # warm-up
        rows.append(("1 in flight", await run_level(plain, requests, args.requests, 1)))
        precomputed = PrecomputedEmbedder(encoder)
        router_only = Router(cfg, precomputed, None)
        await router_only.start()
        await run_level(router_only, requests, len(requests), 1)  # fills the cache
        rows.append(("1 in flight, embedding precomputed (router cost only)",
                     await run_level(router_only, requests, args.requests, 1)))
        for n in args.concurrency:
            rows.append((f"{n} in flight, unbatched", await run_level(plain, requests, args.requests, n)))
        batching = MicroBatchingEmbedder(encoder, args.batch_wait_ms / 1000, args.max_batch)
        batched = Router(cfg, batching, None)
        await batched.start()
        for n in args.concurrency:
            batching.batches.clear()
            stats = await run_level(batched, requests, args.requests, n)
            stats["batch"] = statistics.fmean(batching.batches) if batching.batches else 0
            rows.append((f"{n} in flight, batched", stats))
        return rows

    rows = asyncio.run(bench())
    import torch

    print(f"profile {cfg.profile}, embedding {cfg.embedding_model.engine.model}, {args.requests} decisions per row, "
          f"torch threads {torch.get_num_threads()}, escalations not classified (no k2)")
    print("| load | decisions/s | p50 ms | p95 ms | mean batch |")
    print("|---|---:|---:|---:|---:|")
    for name, s in rows:
        batch = f"{s['batch']:.1f}" if "batch" in s else "1"
        print(f"| {name} | {s['rate']:.0f} | {s['p50']:.1f} | {s['p95']:.1f} | {batch} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
