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
from typing import Any, Callable


def whole_number(minimum: int) -> Callable[[str], int]:
    """An integer of at least ``minimum``."""
    def parse(value: str) -> int:
        number = _read(value, int, "a whole number")
        if number < minimum:
            raise _outside(f"at least {minimum}", value)
        return number
    return parse


def positive_number(value: str) -> float:
    """A finite number above 0 (seconds, a rate): nan and inf would never fire or always fire."""
    number = _read(value, float, "a number")
    if not math.isfinite(number) or number <= 0:
        raise _outside("a number above 0", value)
    return number


def fraction(value: str) -> float:
    """A rate between 0 and 1 (a gate on a success rate or an accuracy)."""
    number = _read(value, float, "a number from 0 to 1")
    if not 0 <= number <= 1:  # nan too
        raise _outside("from 0 to 1", value)
    return number


def _read(value: str, convert: Callable[[str], Any], expected: str) -> Any:
    try:
        return convert(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}") from None


def _outside(rule: str, value: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {rule}, got {value!r}")
