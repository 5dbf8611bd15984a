"""SPEC §4 incident rule: a request under N characters with no code or image features is chat.

Short greetings embed poorly (few tokens, low cosine to every template) and once escalated
to k2 in bulk; this rule keeps them on the cheap chat path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config.routing import ShortTextSettings
from ..context import RequestContext
from .base import SignalMatch
from .code import CodeFeatureDetector

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from .deps import SignalDeps


class ShortTextRule:
    def __init__(self, settings: ShortTextSettings, detector: CodeFeatureDetector):
        self._max_chars = settings.max_chars
        self._detector = detector

    def applies(self, ctx: RequestContext) -> bool:
        return (len(ctx.user_text) < self._max_chars and not ctx.has_image
                and not self._detector.features(ctx.user_text).any)


class ShortTextSignal:
    type = "short_text"

    def __init__(self, rule: ShortTextRule):
        self._rule = rule

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        if self._rule.applies(ctx):
            return [SignalMatch(self.type, "short", 1.0, source="rule:short_text",
                                details={"chars": len(ctx.user_text)})]
        return []


def build(deps: "SignalDeps") -> ShortTextSignal:
    return ShortTextSignal(deps.short_rule)
