"""Numbers no run can mean are usage errors naming the flag (exit 2), before anything starts:
a serve that gives up at once, an eval where every request times out and exits 0, a gate no
run can pass, a smoke with no runs."""

from __future__ import annotations

import pytest

from serve_app import cli
from serve_app.config.arguments import fraction, positive_number, whole_number

CASES = [
    (["serve", "configs/sim.yaml", "--ready-timeout"], "0", "must be a number above 0"),
    (["serve", "configs/sim.yaml", "--ready-timeout"], "-1", "must be a number above 0"),
    (["stop", "--timeout"], "nan", "must be a number above 0"),
    (["stop", "--timeout"], "soon", "expected a number"),
    (["smoke", "--stable-runs"], "0", "must be at least 1"),
    (["smoke", "--concurrency"], "-2", "must be at least 1"),
    (["smoke", "--first-inference-limit"], "0", "must be a number above 0"),
    (["smoke", "--timeout"], "inf", "must be a number above 0"),
    (["eval", "--input", "x.jsonl", "--concurrency"], "0", "must be at least 1"),
    (["eval", "--input", "x.jsonl", "--timeout"], "0", "must be a number above 0"),
    (["eval", "--input", "x.jsonl", "--timeout"], "-1", "must be a number above 0"),
    (["eval", "--input", "x.jsonl", "--max-tokens"], "0", "must be at least 1"),
    (["eval", "--input", "x.jsonl", "--max-tokens"], "1.5", "expected a whole number"),
    (["eval", "--input", "x.jsonl", "--min-success"], "2", "must be from 0 to 1"),
    (["eval", "--input", "x.jsonl", "--min-routing-accuracy"], "-0.1", "must be from 0 to 1"),
    (["eval", "--input", "x.jsonl", "--min-routing-accuracy"], "nan", "must be from 0 to 1"),
]


@pytest.mark.parametrize("command, value, says", CASES, ids=[f"{c[0]}{c[-1]}={v}" for c, v, _ in CASES])
def test_a_number_no_run_can_mean_is_a_usage_error(command, value, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {command[-1]}: {says}, got {value!r}" in err


def test_the_edges_of_each_range_are_accepted():
    assert whole_number(1)("1") == 1 and whole_number(0)("0") == 0
    assert positive_number("0.5") == 0.5 and positive_number("1e-3") == 0.001
    assert fraction("0") == 0.0 and fraction("1") == 1.0
