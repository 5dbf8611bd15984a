import datetime as dt

import pytest

from serve_app.autoscaling.schedule import minute_of_day, scheduled_minimum, window_open
from serve_app.capacity.planner import replicas_at
from serve_app.config.loader import load_config
from serve_app.config.models import ScheduleWindow

UTC = dt.timezone.utc


def at(hh: int, mm: int = 0) -> dt.datetime:
    return dt.datetime(2025, 3, 4, hh, mm, tzinfo=UTC)


def test_minute_of_day():
    assert minute_of_day("00:00") == 0
    assert minute_of_day("08:30") == 510
    assert minute_of_day("24:00") == 1440


def test_daytime_window_is_half_open():
    day = [ScheduleWindow(start="08:00", end="20:00", min_replicas=2)]
    assert scheduled_minimum(day, at(7, 59)) == 0
    assert scheduled_minimum(day, at(8, 0)) == 2
    assert scheduled_minimum(day, at(19, 59)) == 2
    assert scheduled_minimum(day, at(20, 0)) == 0


def test_window_wrapping_midnight():
    night = [ScheduleWindow(start="22:00", end="06:00", min_replicas=1)]
    assert scheduled_minimum(night, at(23, 30)) == 1
    assert scheduled_minimum(night, at(0, 0)) == 1
    assert scheduled_minimum(night, at(5, 59)) == 1
    assert scheduled_minimum(night, at(6, 0)) == 0
    assert scheduled_minimum(night, at(12, 0)) == 0


def test_end_of_day_and_all_day_windows():
    assert window_open(ScheduleWindow(start="18:00", end="24:00", min_replicas=1), 23 * 60 + 59)
    assert not window_open(ScheduleWindow(start="18:00", end="24:00", min_replicas=1), 0)
    all_day = ScheduleWindow(start="00:00", end="00:00", min_replicas=1)
    assert all(window_open(all_day, m) for m in (0, 720, 1439))


def test_overlapping_windows_take_the_largest_minimum():
    windows = [ScheduleWindow(start="08:00", end="20:00", min_replicas=1),
               ScheduleWindow(start="12:00", end="14:00", min_replicas=3)]
    assert scheduled_minimum(windows, at(9)) == 1
    assert scheduled_minimum(windows, at(13)) == 3
    assert scheduled_minimum([], at(13)) == 0


def test_aware_times_are_converted_to_utc():
    day = [ScheduleWindow(start="08:00", end="20:00", min_replicas=1)]
    beijing = dt.timezone(dt.timedelta(hours=8))
    # 03:00 in Beijing is 19:00 UTC the day before: inside the UTC window.
    assert scheduled_minimum(day, dt.datetime(2025, 3, 5, 3, 0, tzinfo=beijing)) == 1
    # 13:00 in Beijing is 05:00 UTC: outside.
    assert scheduled_minimum(day, dt.datetime(2025, 3, 5, 13, 0, tzinfo=beijing)) == 0


@pytest.mark.parametrize("windows", [
    [("08:00", "20:00", 1)],
    [("22:00", "06:00", 2)],
    [("00:00", "00:00", 1)],
    [("06:00", "24:00", 1), ("12:00", "13:30", 2)],
])
def test_agrees_with_the_capacity_planner_every_minute(windows):
    """The planner checks that scheduled replicas fit; the policy must hold the same ones up."""
    cfg = load_config("configs/fleet.yaml")
    model = cfg.model("coder").model_copy(deep=True)
    model.scaling.min_replicas = 0
    model.scaling.schedule = [ScheduleWindow(start=s, end=e, min_replicas=n) for s, e, n in windows]
    day = dt.datetime(2025, 3, 4, tzinfo=UTC)
    for minute in range(24 * 60):
        now = day + dt.timedelta(minutes=minute)
        assert scheduled_minimum(model.scaling.schedule, now) == replicas_at(model, minute), minute
