"""The shared round helpers: the median of odd and even counts, NaN left out, and a difference
only where the min-max ranges do not overlap."""

import math

from loadtests.lib.rounds import differs, fmt, machine, rotated, stats


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
    assert fmt(stats([1.0, 2.0, 4.0]), 1) == "2.0 (1.0–4.0)"
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
