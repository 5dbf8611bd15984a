"""The in-process overhead benchmark runs and reports every panel size."""

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "loadtests" / "bench_fusion_inprocess.py"


def test_bench_reports_overhead_rows(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_fusion_inprocess", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rows.json"
    assert bench.main(["--iterations", "5", "--panel-sizes", "2,5", "--target-p50-ms", "1000",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["panel_size"] for r in rows] == [2, 5]
    for row in rows:
        assert 0 <= row["overhead_p50_ms"] <= row["total_p50_ms"]
    assert "| panel | overhead p50 ms" in capsys.readouterr().out
