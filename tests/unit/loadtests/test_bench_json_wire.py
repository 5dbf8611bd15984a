"""bench_json_wire compares like with like: both variants of each payload give the same value."""

import json

import numpy as np

from loadtests.bench_json_wire import VARIANTS, payloads


def test_both_variants_write_and_read_the_same_values():
    for name, calls in payloads().items():
        before, now = (calls[v]() for v in VARIANTS)
        if isinstance(before, bytes):
            before, now = json.loads(before), json.loads(now)
        if name.startswith("embeddings"):
            rows = [np.array([d["embedding"] for d in body["data"]], dtype=np.float32) for body in (before, now)]
            assert np.array_equal(*rows) and rows[0].shape == (16, 384)
            before["data"] = now["data"] = None
        assert before == now, name
