"""The one interface every signal implements: a request context in, named matches out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ..context import RequestContext


@dataclass(frozen=True)
class SignalMatch:
    """One named finding of one signal type, e.g. intent:code at 0.83 (from the embedding)."""

    type: str
    name: str
    confidence: float
    # Where the finding came from (e.g. "embedding", "classifier", "rule:image_url"); shown in
    # traces and debug headers so an operator can see *why* a request went where it went.
    source: str = ""
    # Time spent on a remote call made for this match (the k2 classifier), else None.
    latency_ms: Optional[float] = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def label(self) -> str:
        return f"{self.type}:{self.name}"


class Signal(Protocol):
    """A signal type. ``evaluate`` must not raise for any well-formed context."""

    type: str

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]: ...
