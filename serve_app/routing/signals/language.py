"""Language by script (no model): the dominant script names the language; two scripts -> mixed.

Latin text is reported as ``en`` only when enough of its words are common English words
(else ``latin``), because the packaged MiniLM embedder is English-only and operators route on
exactly that difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
import unicodedata
from collections import Counter

from ...config.routing import LanguageSettings
from ..context import RequestContext
from .base import SignalMatch

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from .deps import SignalDeps

# Unicode character-name prefix -> script label -> language code reported.
_SCRIPT_OF_NAME = (("CJK", "han"), ("HIRAGANA", "kana"), ("KATAKANA", "kana"), ("HANGUL", "hangul"),
                   ("CYRILLIC", "cyrillic"), ("ARABIC", "arabic"), ("DEVANAGARI", "devanagari"),
                   ("GREEK", "greek"), ("HEBREW", "hebrew"), ("THAI", "thai"), ("LATIN", "latin"))
_LANGUAGE_OF_SCRIPT = {"han": "zh", "kana": "ja", "hangul": "ko", "cyrillic": "ru", "arabic": "ar",
                       "devanagari": "hi", "greek": "el", "hebrew": "he", "thai": "th"}
_ENGLISH_WORDS = frozenset("""the a an and or of to in on for with is are was were be been it this that
what how why when where which who can could would should do does did i you we they he she my your
me please not no yes if then than from by as at so about have has had will just there their""".split())
_WORD = re.compile(r"[A-Za-z']+")


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    for prefix, script in _SCRIPT_OF_NAME:
        if name.startswith(prefix):
            return script
    return "other"


class LanguageSignal:
    type = "language"

    def __init__(self, settings: LanguageSettings):
        self._settings = settings

    def _latin_language(self, text: str) -> str:
        words = [w.lower() for w in _WORD.findall(text)]
        if not words:
            return "latin"
        share = sum(1 for w in words if w in _ENGLISH_WORDS) / len(words)
        # One- or two-word texts rarely contain a stopword; count them as English.
        return "en" if share >= self._settings.english_min_stopword_share or len(words) <= 2 else "latin"

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        scripts = Counter(s for s in map(_script, ctx.user_text) if s is not None)
        total = sum(scripts.values())
        if total == 0:
            return [SignalMatch(self.type, "unknown", 1.0, source="rule:script")]
        # Japanese mixes kanji (han) with kana: with any kana, han letters count as Japanese.
        if "kana" in scripts and "han" in scripts:
            scripts["kana"] += scripts.pop("han")
        ranked = scripts.most_common()
        top_script, top_count = ranked[0]
        language = (self._latin_language(ctx.user_text) if top_script == "latin"
                    else _LANGUAGE_OF_SCRIPT.get(top_script, "other"))
        matches = [SignalMatch(self.type, language, top_count / total, source="rule:script",
                               details={"scripts": dict(scripts)})]
        if len(ranked) > 1 and ranked[1][1] / total >= self._settings.mixed_min_share:
            matches.append(SignalMatch(self.type, "mixed", ranked[1][1] / total, source="rule:script"))
        return matches


def build(deps: "SignalDeps") -> LanguageSignal:
    return LanguageSignal(deps.settings.language)
