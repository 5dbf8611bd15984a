"""Keyword / regex lists: each named list in ``routing.signals.keywords`` is one match name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import re

from ...config.routing import KeywordRule
from ..context import RequestContext
from .base import SignalMatch

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from .deps import SignalDeps


def _compile(rule: KeywordRule) -> list[re.Pattern[str]]:
    flags = 0 if rule.case_sensitive else re.IGNORECASE
    # Whole words only: "hack" must not fire on "hackathon"-free text like "shackle".
    patterns = [re.compile(r"(?<!\w)" + re.escape(k) + r"(?!\w)", flags) for k in rule.keywords]
    patterns += [re.compile(p, flags) for p in rule.regex]
    return patterns


class KeywordSignal:
    type = "keyword"

    def __init__(self, rules: dict[str, KeywordRule]):
        self._rules = {name: _compile(rule) for name, rule in rules.items()}

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        matches = []
        for name, patterns in self._rules.items():
            hit = next((p for p in patterns if p.search(ctx.user_text)), None)
            if hit is not None:
                matches.append(SignalMatch(self.type, name, 1.0, source="rule:keyword",
                                           details={"pattern": hit.pattern}))
        return matches


def build(deps: "SignalDeps") -> KeywordSignal:
    return KeywordSignal(dict(deps.settings.keywords.items()))
