"""The shared round helpers: the median of odd and even counts, NaN left out, and a difference
only where the min-max ranges do not overlap."""

import math

from loadtests.lib.rounds import differs, fmt, machine, markdown_table, rotated, stats


def test_median_of_an_odd_count_is_the_middle_value():
    assert stats([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}


def test_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert stats([4.0, 1.0, 3.0, 2.0]) == {"median": 2.5, "min": 1.0, "max": 4.0}


def test_nan_values_are_left_out():
    assert stats([float("nan"), 5.0, 1.0, float("nan"), 3.0]) == {"median": 3.0, "min": 1.0, "max": 5.0}
    empty = stats([float("nan")])
    assert all(math.isnan(v) for v in empty.values())
    assert all(math.isnan(v) for v in stats([]).values())


def test_overlapping_ranges_are_no_difference():
    a, b = stats([1.0, 2.0, 3.0]), stats([2.5, 4.0, 5.0])
    assert not differs(a, b) and not differs(b, a)
    touching = stats([3.0, 4.0, 6.0])
    assert not differs(a, touching)           # sharing an end point is still an overlap
    inside = stats([1.5, 2.0, 2.5])
    assert not differs(a, inside)


def test_disjoint_ranges_differ_either_way_round():
    a, b = stats([1.0, 2.0, 3.0]), stats([3.5, 4.0, 5.0])
    assert differs(a, b) and differs(b, a)


def test_fmt_and_machine():
    from loadtests.lib.rounds import fmt_interval

    assert fmt(stats([1.0, 2.0, 4.0]), 1) == "2.0 (1.0–4.0)"
    assert fmt_interval((0.8884, 0.9401)) == "0.888–0.940"
    assert fmt_interval((7.5451, 9.7317), 2) == "7.55–9.73"
    assert fmt_interval(None) == "–"
    info = machine()
    assert info["cpus"] and info["cpu"]


def test_each_round_rotates_the_order_so_no_variant_always_runs_first():
    rows = ["a", "b", "c"]
    assert [rotated(rows, r) for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert rotated(("x", "y"), 1) == ("y", "x")


def test_every_benchmark_refuses_fewer_than_three_rounds_at_parse_time():
    import argparse

    import pytest

    from loadtests.lib.rounds import add_rounds_argument

    parser = argparse.ArgumentParser()
    add_rounds_argument(parser)
    assert parser.parse_args([]).rounds == 3
    assert parser.parse_args(["--rounds", "5"]).rounds == 5
    with pytest.raises(SystemExit):
        parser.parse_args(["--rounds", "2"])


def test_median_interval_is_the_binomial_order_statistics():
    from loadtests.lib.rounds import median_interval

    # Fewer than 6 rounds: even min-max covers the median with less than 95 % (1 - 2/2^5).
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    # 7 rounds: min-max, coverage 1 - 2/128 = 98.4 %; shuffled input and NaN changes nothing.
    assert median_interval([5.0, 1.0, float("nan"), 7.0, 3.0, 2.0, 6.0, 4.0]) == (1.0, 7.0)
    # 14 rounds: P(B(14, 1/2) <= 2) = 0.0065 but P(<= 3) = 0.029 > 0.025, so the 3rd and 12th.
    assert median_interval([float(v) for v in range(1, 15)]) == (3.0, 12.0)
    # 21 rounds: P(<= 5) = 0.013, P(<= 6) = 0.039, so the 6th and 16th.
    assert median_interval([float(v) for v in range(21, 0, -1)]) == (6.0, 16.0)
    # A lower confidence narrows it: 14 rounds at 90 % take the 4th and 11th.
    assert median_interval([float(v) for v in range(1, 15)], confidence=0.90) == (4.0, 11.0)


def test_verdict_needs_the_whole_interval_on_one_side():
    import pytest

    from loadtests.lib.rounds import verdict

    assert verdict((0.96, 1.02), ">= 0.95") == "met"
    assert verdict((0.80, 0.94), ">= 0.95") == "not met"
    assert verdict((0.85, 0.98), ">= 0.95") == "no measurable difference from the target"
    assert verdict((0.95, 1.10), ">= 0.95") == "met"                 # the bound itself is on target
    assert verdict((1.25, 1.40), "<= 1.2") == "not met"
    assert verdict((-0.3, 0.4), "<= 0.5") == "met"
    assert verdict(None, "<= 0.5") == "too few rounds"
    with pytest.raises(ValueError):
        verdict((1.0, 2.0), "about 1")


def test_markdown_table_gives_the_header_its_rule_and_one_line_per_row():
    assert markdown_table(["a", "b"], [["1", "2"], ["3", "4"]]).splitlines() == [
        "| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
