"""Load shapes: concurrent users over time, as stages the locustfile's LoadTestShape follows."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Optional


@dataclass(frozen=True)
class Stage:
    until_s: float      # this stage lasts until this many seconds after the start
    users: int
    spawn_rate: float   # users started (or stopped) per second


@dataclass(frozen=True)
class Scenario:
    name: str
    stages: tuple[Stage, ...]

    @property
    def duration_s(self) -> float:
        return self.stages[-1].until_s

    def at(self, t: float) -> Optional[Stage]:
        """The stage running ``t`` seconds in; None once the scenario is over."""
        return next((s for s in self.stages if t < s.until_s), None)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "stages": [asdict(s) for s in self.stages]})

    @classmethod
    def from_json(cls, text: str) -> "Scenario":
        data = json.loads(text)
        return cls(data["name"], tuple(Stage(**s) for s in data["stages"]))


def build_scenario(name: str, duration_s: float, users: int, *, base_users: int = 1,
                   step_at_s: Optional[float] = None) -> Scenario:
    """``constant``: ``users`` throughout. ``step``: ``base_users`` until ``step_at_s`` (default a
    third of the way), then ``users`` at once. ``ramp``: 0 → ``users`` linearly."""
    if duration_s <= 0 or users < 1 or base_users < 0:
        raise ValueError("need duration_s > 0, users >= 1, base_users >= 0")
    if name == "constant":
        return Scenario(name, (Stage(duration_s, users, users),))
    if name == "step":
        step = duration_s / 3 if step_at_s is None else step_at_s
        if not 0 < step < duration_s:
            raise ValueError("step_at_s must lie inside the duration")
        return Scenario(name, (Stage(step, base_users, max(1, base_users)), Stage(duration_s, users, users)))
    if name == "ramp":
        return Scenario(name, (Stage(duration_s, users, max(0.1, users / duration_s)),))
    raise ValueError(f"unknown scenario {name!r}; use constant, step or ramp")
