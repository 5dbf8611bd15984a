"""bench_idle_gap.py's arguments: the gaps are a comma-separated list of non-negative ms."""

import argparse

import pytest

from loadtests.bench_idle_gap import gaps_list


def test_gaps_parse_as_milliseconds():
    assert gaps_list("0,3, 10,30.5") == [0.0, 3.0, 10.0, 30.5]


@pytest.mark.parametrize("text", ["", "3,-1", ","])
def test_no_gap_or_a_negative_gap_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--gaps"):
        gaps_list(text)
