"""``bench_gateway.py --pool``: several runs' rounds pooled into one set of per-round ratios,
each round keeping its own pairing (a run's round 1 never meets another run's round 1)."""

import json

import pytest

from loadtests import bench_gateway


def _run(rps_horizon: list[float], rps_bare: list[float], levels=(1, 64)) -> dict:
    rows = []
    for rnd, (h, b) in enumerate(zip(rps_horizon, rps_bare), start=1):
        for c in levels:
            # p50 at 1 in flight: the gateway 0.2 ms over the bare graph in every round.
            rows.append({"round": rnd, "variant": "horizon", "concurrency": c, "rps": h * c,
                         "p50_ms": 1.2, "p99_ms": 2.0 * c})
            rows.append({"round": rnd, "variant": "bare", "concurrency": c, "rps": b * c,
                         "p50_ms": 1.0, "p99_ms": 1.0 * c})
    return {"command": "python loadtests/bench_gateway.py --rounds %d" % len(rps_horizon),
            "rounds": len(rps_horizon), "machine": {"cpus": 2}, "rows": rows}


def test_pooled_rounds_pair_within_each_run(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    # Run a: the gateway at 0.9 of the bare graph; run b at 1.0, on a machine twice as fast.
    a.write_text(json.dumps(_run([90.0] * 4, [100.0] * 4)))
    b.write_text(json.dumps(_run([200.0] * 3, [200.0] * 3)))
    out = tmp_path / "pooled.json"
    result = bench_gateway.pool([str(a), str(b)], str(out))

    ratios = result["per_round"]["saturation_ratio"]
    # Seven rounds, each a ratio within its own run: pairing a's round 1 with b's would give 0.45.
    assert sorted(round(r, 6) for r in ratios) == [0.9] * 4 + [1.0] * 3
    sat = result["ratios"]["saturation_ratio"]
    assert sat["rounds"] == 7 and sat["median"] == pytest.approx(0.9)
    assert sat["interval_95"] == pytest.approx((0.9, 1.0))
    assert sat["verdict"] == "no measurable difference from the target"
    assert result["ratios"]["p99_ratio_at_64"]["verdict"] == "not met"      # 2.0 in every round
    assert result["ratios"]["p50_added_ms_at_1"]["median"] == pytest.approx(0.2)
    assert result["ratios"]["p50_added_ms_at_1"]["verdict"] == "met"
    assert [r["file"] for r in result["runs"]] == [str(a), str(b)]
    assert json.loads(out.read_text())["ratios"]["saturation_ratio"]["rounds"] == 7
    assert "pooled 2 run(s): a.json, b.json" in capsys.readouterr().out
    assert bench_gateway.ENGINE_RATIO not in result["ratios"]          # neither run measured it


def test_runs_with_different_in_flight_levels_are_refused(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_run([90.0] * 3, [100.0] * 3, levels=(1, 64))))
    b.write_text(json.dumps(_run([90.0] * 3, [100.0] * 3, levels=(1, 16, 64))))
    with pytest.raises(SystemExit, match="in-flight levels"):
        bench_gateway.pool([str(a), str(b)], str(tmp_path / "out.json"))


def test_engine_rounds_pool_beside_the_simulated_rows(tmp_path):
    """An --engine-only run (no rows) pools its tokens/s ratios with a run that has both."""
    both = _run([90.0] * 3, [100.0] * 3)
    both["engine"] = {"ratio_per_round": [0.95, 0.99, 1.01], "paired_ratio_per_round": []}
    engine_only = {"command": "python loadtests/bench_gateway.py --engine-only", "rounds": 4, "rows": [],
                   "engine": {"ratio_per_round": [0.98, 1.02, 0.99, 1.00],
                              "paired_ratio_per_round": [0.999, 0.998, 1.0, 0.997]}}
    a, b = tmp_path / "both.json", tmp_path / "engine.json"
    a.write_text(json.dumps(both))
    b.write_text(json.dumps(engine_only))
    result = bench_gateway.pool([str(a), str(b)], str(tmp_path / "out.json"))

    tokens = result["ratios"][bench_gateway.ENGINE_RATIO]
    assert tokens["rounds"] == 7 and tokens["median"] == pytest.approx(0.99)
    assert tokens["interval_95"] == pytest.approx((0.95, 1.02))       # 7 rounds: min-max
    assert tokens["verdict"] == "no measurable difference from the target"   # target >= 0.97
    assert result["ratios"][bench_gateway.ENGINE_PAIRED_RATIO]["rounds"] == 4
    assert result["ratios"]["saturation_ratio"]["rounds"] == 3        # only the run with rows
    assert [r["engine_rounds"] for r in result["runs"]] == [3, 4]
