"""Scheduled minimum replicas: daily UTC windows that hold replicas up (SPEC §2 hardware plan).

Node B cannot keep coder, r1-distill and qwen-72b resident at once, so cold models are brought
up for their traffic window and released outside it. A window is ``start``..``end`` as HH:MM
in UTC; a window whose end is not after its start wraps past midnight (so ``start == end`` is
open all day) — the same reading the capacity planner uses when it checks that scheduled
replicas fit the nodes (serve_app.capacity.planner.replicas_at).
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol, Sequence

MINUTES_PER_DAY = 24 * 60


class DailyWindow(Protocol):
    """What :func:`scheduled_minimum` reads of a window (``ScheduleWindow`` has it)."""

    start: str
    end: str
    min_replicas: int


def minute_of_day(hhmm: str) -> int:
    """``"08:30"`` → 510; ``"24:00"`` → 1440 (the end of the day)."""
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def window_open(window: DailyWindow, minute: int) -> bool:
    """Whether ``window`` is open at ``minute`` (0..1439) of the UTC day."""
    start, end = minute_of_day(window.start), minute_of_day(window.end)
    if start < end:
        return start <= minute < end
    return minute >= start or minute < end


def scheduled_minimum(schedule: Sequence[DailyWindow], now_utc: dt.datetime) -> int:
    """The largest ``min_replicas`` of the windows open at ``now_utc`` (0 when none is open).

    A naive datetime is taken to be UTC already; an aware one is converted.
    """
    if now_utc.tzinfo is not None:
        now_utc = now_utc.astimezone(dt.timezone.utc)
    minute = now_utc.hour * 60 + now_utc.minute
    return max((w.min_replicas for w in schedule if window_open(w, minute)), default=0)
