"""Health-aware degradation (SPEC §6): while a model's estimated queue wait exceeds its bound,
send a configured share of its matching traffic to a degrade target.

The share is taken by counting, not by chance: of the requests that find the model over its
bound, request *n* is degraded when ``floor(n * share)`` grows, so any run of requests sends
exactly ``share`` of them (±1) and tests can assert exact counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..config.resilience import DegradeRule

# Shares are compared in millionths so the counting is exact integer arithmetic.
_SHARE_SCALE = 1_000_000


@dataclass(frozen=True)
class Degradation:
    rule: DegradeRule
    queue_wait_s: float

    @property
    def reason(self) -> str:
        return (f"estimated queue wait {self.queue_wait_s:.1f} s > {self.rule.max_queue_wait_s:g} s; "
                f"degraded to {self.rule.target}")


class Degrader:
    def __init__(self, rules: list[DegradeRule]):
        self._rules = list(rules)
        self._over_bound_seen = [0] * len(self._rules)

    def choose(self, alias: str, task_type: Optional[str], queue_wait_s: Callable[[str], float],
               target_ok: Callable[[str], bool]) -> Optional[Degradation]:
        """The degradation for this request, or None to keep ``alias``.

        ``queue_wait_s(alias)`` gives a model's estimated queue wait; ``target_ok(alias)``
        says whether a target can take traffic now (degrading onto an open breaker is moot).
        The first rule for ``alias`` and this task type decides.
        """
        for i, rule in enumerate(self._rules):
            if rule.model != alias or (rule.task_types and task_type not in rule.task_types):
                continue
            wait = queue_wait_s(alias)
            if wait <= rule.max_queue_wait_s or not target_ok(rule.target):
                return None
            n = self._over_bound_seen[i]
            self._over_bound_seen[i] = n + 1
            share = round(rule.share * _SHARE_SCALE)
            if (n + 1) * share // _SHARE_SCALE > n * share // _SHARE_SCALE:
                return Degradation(rule, wait)
            return None
        return None
