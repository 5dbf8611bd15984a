"""A small closed-loop HTTP load generator (aiohttp), run in its own process.

``python -m loadtests.lib.httpload URL CONCURRENCY SECONDS BODY_JSON [MAX_REQUESTS]`` prints one
JSON line: latencies are measured per request from send to full body; loopback targets only. With
``"stream": true`` in the body it also measures the time to first token: from send to the first
server-sent event that carries a token (``ttft_p50_ms``, ``ttft_p99_ms``): text, reasoning or a
tool call, not the role-only opening event (``"content": ""``) that engines send first.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from urllib.parse import urlparse

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def carries_token(line: bytes) -> bool:
    """Is this SSE line an event with generated output in it? (An empty ``content`` is not:
    counting the role-only opening event would credit a server that sends it at once, before
    any token, with a shorter time to first token than one that holds it back.)"""
    if not line.startswith(b"data:") or b'"choices"' not in line:
        return False
    try:
        event = json.loads(line[5:])
    except ValueError:
        return False
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls") \
                or choice.get("text"):
            return True
    return False


async def _run(url: str, concurrency: int, seconds: float, body: bytes, max_requests: int) -> dict:
    import aiohttp

    if urlparse(url).hostname not in LOOPBACK:
        raise SystemExit(f"refusing non-loopback target {url}")
    latencies: list[float] = []
    ttfts: list[float] = []
    stream = b'"stream": true' in body or b'"stream":true' in body
    errors = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline and len(latencies) + errors < max_requests:
                start = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
                        if r.status != 200:
                            await r.read()
                            errors += 1
                            continue
                        if stream:
                            first = None
                            async for line in r.content:
                                if first is None and carries_token(line):
                                    first = time.perf_counter() - start
                            if first is not None:
                                ttfts.append(first)
                        else:
                            await r.read()
                except aiohttp.ClientError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - start)

        # Warm-up: a few sequential requests so connection set-up is not measured.
        for _ in range(5):
            async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
                await r.read()
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    ttfts.sort()

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else float("nan")

    out = {"n": len(latencies), "errors": errors, "rps": len(latencies) / elapsed,
           "p50_ms": pct(latencies, 0.50), "p99_ms": pct(latencies, 0.99)}
    if stream:
        out.update(ttft_p50_ms=pct(ttfts, 0.50), ttft_p99_ms=pct(ttfts, 0.99))
    return out


def main() -> None:
    url, concurrency, seconds, body = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    max_requests = int(sys.argv[5]) if len(sys.argv) > 5 else 200_000
    print(json.dumps(asyncio.run(_run(url, concurrency, seconds, body.encode(), max_requests))))


if __name__ == "__main__":
    main()
