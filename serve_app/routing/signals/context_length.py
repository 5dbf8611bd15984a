"""Context length: a token estimate of the whole conversation, as one named bucket.

It measures the real length even when the intent signal embeds only a window of the text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config.routing import ContextLengthSettings
from ...messages.view import estimate_text_tokens
from ..context import RequestContext
from .base import SignalMatch

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from .deps import SignalDeps


class ContextLengthSignal:
    type = "context_length"

    def __init__(self, settings: ContextLengthSettings):
        self._settings = settings

    def estimate_tokens(self, ctx: RequestContext) -> int:
        return estimate_text_tokens(ctx.conversation_text, self._settings.chars_per_token)

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        tokens = self.estimate_tokens(ctx)
        return [SignalMatch(self.type, b.name, 1.0, source="rule:token_estimate",
                            details={"tokens": tokens})
                for b in self._settings.buckets
                if tokens >= b.min_tokens and (b.max_tokens is None or tokens < b.max_tokens)]


def build(deps: "SignalDeps") -> ContextLengthSignal:
    return ContextLengthSignal(deps.settings.context_length)
