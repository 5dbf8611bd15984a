"""loadtests/compare_memory_runs.py: every round's figure per variant, the median and range of
each, and a clear stop when a variant has no runs."""

from __future__ import annotations

import json

import pytest

from loadtests.compare_memory_runs import load_runs, main, table


def _run(rise: float, other_pss: float, processes: int, cpu: float) -> dict:
    rows = [{"group": "ingress", "processes": 1, "pss_mib": 100.0},
            {"group": "other-ray", "processes": processes, "pss_mib": other_pss}]
    return {"idle": {"rise_mib": rise, "table": rows}, "worst": {"rise_mib": rise + 10},
            "idle_cpu": {"total_pct_of_core": cpu, "groups": {"other-ray": cpu / 10},
                         "machine_busy_pct_of_core": cpu - 1}}


def _write(folder, name, run):
    (folder / name).write_text(json.dumps(run))


def test_the_table_gives_each_variants_median_range_and_every_round(tmp_path):
    for r, (b, a) in enumerate([(3500, 3380), (3510, 3370), (3490, 3400)], start=1):
        _write(tmp_path, f"before-r{r}.json", _run(b, 243.0, 2, 17.0 + r))
        _write(tmp_path, f"after-r{r}.json", _run(a, 125.0, 1, 15.0 + r))
    (tmp_path / "notes.json").write_text("{}")          # not a run: ignored
    runs = load_runs(tmp_path)
    assert sorted(runs) == ["after", "before"] and sorted(runs["after"]) == [1, 2, 3]
    text, figures = table(runs, ["before", "after"], "other-ray")
    idle = figures["used memory above the idle machine, idle (MiB)"]
    assert idle["before"]["median"] == 3500 and (idle["after"]["min"], idle["after"]["max"]) == (3370, 3400)
    assert figures["`other-ray` processes"]["after"]["median"] == 1
    assert figures["total PSS, idle (MiB)"]["before"]["rounds"] == {1: 343.0, 2: 343.0, 3: 343.0}
    assert "| 3500.00 (3490.00–3510.00) | 3380.00 (3370.00–3400.00) |" in text
    assert "before 3500.00 / 3510.00 / 3490.00; after 3380.00 / 3370.00 / 3400.00" in text


def test_a_variant_without_runs_stops_with_its_name(tmp_path):
    _write(tmp_path, "before-r1.json", _run(3500, 243.0, 2, 17.0))
    with pytest.raises(SystemExit, match="after"):
        main([str(tmp_path), "--variants", "before", "after"])
