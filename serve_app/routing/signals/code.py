"""Code features: a markdown fence, or enough language-syntax hits (``def f(``, ``#include <``...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
from dataclasses import dataclass

from ...config.routing import CodeFeatureSettings
from ..context import RequestContext
from .base import SignalMatch

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from .deps import SignalDeps

_FENCE = re.compile(r"```|~~~")


@dataclass(frozen=True)
class CodeFeatures:
    fenced: bool
    syntax_hits: int
    min_syntax_hits: int

    @property
    def syntax(self) -> bool:
        return self.syntax_hits >= self.min_syntax_hits

    @property
    def any(self) -> bool:
        return self.fenced or self.syntax


class CodeFeatureDetector:
    """Compiled patterns of one profile; shared by the code and short-text signals."""

    def __init__(self, settings: CodeFeatureSettings):
        self._patterns = [re.compile(p, re.M) for p in settings.syntax_patterns]
        self._min_hits = settings.min_syntax_hits

    def features(self, text: str) -> CodeFeatures:
        hits = sum(1 for p in self._patterns if p.search(text))
        return CodeFeatures(fenced=bool(_FENCE.search(text)), syntax_hits=hits,
                            min_syntax_hits=self._min_hits)


class CodeSignal:
    type = "code"

    def __init__(self, detector: CodeFeatureDetector):
        self._detector = detector

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        features = self._detector.features(ctx.user_text)
        matches: list[SignalMatch] = []
        if features.fenced:
            matches.append(SignalMatch(self.type, "fenced", 1.0, source="rule:fence"))
        if features.syntax:
            # More pattern hits = surer it is code; saturates at twice the minimum.
            confidence = min(1.0, 0.5 + 0.5 * features.syntax_hits / (2 * features.min_syntax_hits))
            matches.append(SignalMatch(self.type, "syntax", confidence, source="rule:syntax",
                                       details={"hits": features.syntax_hits}))
        if matches:
            matches.append(SignalMatch(self.type, "any", max(m.confidence for m in matches),
                                       source="rule:code_features"))
        return matches


def build(deps: "SignalDeps") -> CodeSignal:
    return CodeSignal(deps.code_detector)
