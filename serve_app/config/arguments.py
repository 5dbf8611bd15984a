"""Argument types for the numbers of the operator commands (``horizon plan``, ``eval``,
``smoke``, ``serve``, ``stop``).

A count of 0, a timeout of -1 or a rate of 2 is a typo, not a request: without these, such a
value ran (a serve that gave up at once, an eval where every request timed out and exit 0, a
gate no run could pass). argparse turns the ``ArgumentTypeError`` into a usage line naming the
flag, and exit 2.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def whole_number(minimum: int) -> Callable[[str], int]:
    """An integer of at least ``minimum``."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value!r}")
        return number
    return parse


def positive_number(value: str) -> float:
    """A finite number above 0 (seconds, a rate): nan and inf would never fire or always fire."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {value!r}")
    return number


def fraction(value: str) -> float:
    """A rate between 0 and 1 (a gate on a success rate or an accuracy)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value!r}") from None
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {value!r}")
    return number
