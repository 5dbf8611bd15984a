"""An in-memory metrics backend for tests: records what ``ray.serve.metrics`` would export.

``configure_metrics(factory=RecordingMetrics())`` routes every ``record_*`` call here. It checks
tags as strictly as Ray does (exactly the declared keys, string values), so a test that passes
here does not fail on a replica with "missing value for tag key".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional

from .metrics import MetricSpec, flush_metrics

TagSet = frozenset[tuple[str, str]]


class _Recorded:
    def __init__(self, owner: "RecordingMetrics", spec: MetricSpec, boundaries: Optional[list[float]]):
        self._owner = owner
        self.spec = spec
        self.boundaries = boundaries

    def _key(self, tags: Optional[dict[str, str]]) -> TagSet:
        tags = tags or {}
        if set(tags) != set(self.spec.tag_keys):
            raise ValueError(f"{self.spec.name}: tags {sorted(tags)} != declared {sorted(self.spec.tag_keys)}")
        if not all(isinstance(v, str) for v in tags.values()):
            raise TypeError(f"{self.spec.name}: tag values must be str")
        return frozenset(tags.items())

    def inc(self, value: float = 1.0, tags: Optional[dict[str, str]] = None) -> None:
        assert self.spec.kind == "counter", self.spec.name
        self._owner.values[self.spec.name][self._key(tags)] += value

    def set(self, value: float, tags: Optional[dict[str, str]] = None) -> None:
        assert self.spec.kind == "gauge", self.spec.name
        self._owner.values[self.spec.name][self._key(tags)] = value

    def observe(self, value: float, tags: Optional[dict[str, str]] = None) -> None:
        assert self.spec.kind == "histogram", self.spec.name
        self._owner.observations[self.spec.name][self._key(tags)].append(value)


class RecordingMetrics:
    """A :class:`~serve_app.observability.metrics.MetricFactory` keeping values in memory."""

    def __init__(self) -> None:
        self.values: dict[str, dict[TagSet, float]] = defaultdict(lambda: defaultdict(float))
        self.observations: dict[str, dict[TagSet, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.created: dict[str, _Recorded] = {}

    def __call__(self, spec: MetricSpec, boundaries: Optional[list[float]]) -> Any:
        recorded = _Recorded(self, spec, boundaries)
        self.created[spec.name] = recorded
        return recorded

    def value(self, name: str, **tags: Any) -> float:
        """Counter total / gauge value of the series with exactly these tags (0 if none)."""
        flush_metrics()  # counters reach the backend once per flush interval
        return self.values.get(name, {}).get(frozenset((k, str(v)) for k, v in tags.items()), 0.0)

    def total(self, name: str) -> float:
        """Sum over every series of a counter."""
        flush_metrics()
        return sum(self.values.get(name, {}).values())

    def observed(self, name: str, **tags: Any) -> list[float]:
        return list(self.observations.get(name, {}).get(frozenset((k, str(v)) for k, v in tags.items()), []))
