"""bench_ingress_inprocess.py drives the gateway's real HTTP app and the bare route in process:
both answer the benchmark's request, every round has both rows, and the summary is per round."""

from __future__ import annotations

import asyncio
import json

import pytest

from loadtests import bench_ingress_inprocess as bench
from loadtests.bench_gateway import BODY


def test_both_apps_answer_the_benchmarks_request_through_asgi():
    body = json.dumps(BODY).encode()
    for app in (bench.gateway_app(), bench.bare_app()):
        assert asyncio.run(bench.caller(app, body)()) == 200


def test_a_bad_request_is_seen_as_its_status():
    call = bench.caller(bench.gateway_app(), b'{"model": "qwen-72b"}')  # no messages
    assert asyncio.run(call()) == 400


def test_rounds_alternate_both_rows_and_the_summary_pairs_them_by_round():
    rows = asyncio.run(bench.run(rounds=3, requests=20, warmup=5))
    assert [(r["round"], r["variant"]) for r in rows] == [
        (1, "gateway"), (1, "bare"), (2, "bare"), (2, "gateway"), (3, "gateway"), (3, "bare")]
    assert all(r["us_per_request"] > 0 for r in rows)
    summary = bench.summarize(rows)
    by_round = {(r["round"], r["variant"]): r["us_per_request"] for r in rows}
    added = sorted(by_round[(n, "gateway")] - by_round[(n, "bare")] for n in (1, 2, 3))
    assert summary["gateway_added_us"] == pytest.approx({"median": added[1], "min": added[0], "max": added[2]})
