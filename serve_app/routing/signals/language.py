"""Language by script and common words (no model).

The dominant Unicode script names the language for the scripts one language dominates (han ->
``zh``, kana -> ``ja``, hangul -> ``ko``, cyrillic -> ``ru``, ...); a second script with enough
of the letters adds ``mixed``. Latin text is named by the language whose common function words
("the", "und", "que", "het", ...) make up the largest share of its words, at least
``min_stopword_share`` of them (and two words at least, but for English), English winning a
tie; text with too few of any list's words
(code, formulas, names, keyboard mashing, a Latin language without a list) is ``latin``.

Operators route on these names, and the intent signal uses them to know when its embedding
model cannot read a request (``routing.signals.intent.embedding_languages``: the packaged
MiniLM reads English only). Word lists are short and approximate: a two-word text counts as
English, as before, because it rarely holds a function word of any language.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

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

# Common function words of the Latin-script languages named. A word on the English list counts
# for English only (Hungarian "a", "is", Polish "i", "to", Danish "for"), so that English text
# ("gift ideas for men") is never named after words it shares with another language; and other
# languages' one-letter words do not count (code is full of "s", "v", "y", "o").
_WORDS: dict[str, frozenset[str]] = {lang: frozenset(words.split()) for lang, words in {
    "en": """the a an and or of to in on for with is are was were be been it this that what how why
        when where which who can could would should do does did i you we they he she my your me
        please not no yes if then than from by as at so about have has had will just there their""",
    "es": """el la los las del que y en un una es por con para se lo como más pero su al le ya
        este sí porque esta entre cuando muy sin sobre también hasta hay donde desde todo nos
        les ni otro otra eso esto yo mi mis tú te tu tus qué cómo dónde cuál cuánto puedo
        puedes quiero tengo hacer algo está están estoy ese esa son fue ser hola gracias""",
    "pt": """o os as do da dos das que e em um uma é para com não por se na no mais como mas ao
        ele ela seu sua ou quando muito já também só pelo pela até isso entre depois sem mesmo
        você vocês meu minha nós lhe este esta está estou posso fazer tenho quero onde porque
        obrigado olá são foi ser""",
    "fr": """le la les des du un une et est que qui dans pour pas sur au aux avec ce cette il
        elle ne se plus par je tu vous nous mon ma mes son sa ses sont ont être fait comment
        pourquoi où quel quelle mais ou donc c'est j'ai n'est qu'il d'un d'une est-ce peux
        veux faire merci bonjour aussi très""",
    "de": """der die das und ist nicht ein eine einen zu den von mit sich des auf für im dem
        auch es als nach wie bei oder aus wenn noch um nur zum kann ich du sie wir ihr mein
        meine meinen dein deine wird werden hat haben sind aber bitte warum wo welche können
        soll mir mich dich uns dass über wie kannst danke hallo diese dieser""",
    "it": """il lo la gli le di del della dei che è un una per con non si da al dal ma come
        anche più sono mi ti ci io tu lui lei noi voi questo questa quello perché cosa dove
        quando molto ho hai ha fare posso vorrei sul nel nella degli delle alla grazie ciao""",
    "nl": """de het een en van is dat op te voor met niet zijn er maar om ook als dan bij nog
        wat ik je jij we wij hij zij ze mijn hoe waarom kan kun wil heb heeft deze dit die
        naar uit door wordt worden zou graag bedankt""",
    "pl": """i w na z że nie się do to jest jak co o ale za od po tak czy jestem jesteś mam
        może przez dla już tylko ten ta te być mi mnie ja ty on ona my wy jego jej ich bardzo
        jeszcze gdzie dlaczego kiedy który która które proszę dziękuję""",
    "tr": """ve bir bu da de için ile ne mi mı mu mü çok daha gibi ben sen biz siz onlar var
        yok ama ya olarak kadar nasıl neden nerede şu her değil bana beni benim senin lütfen
        teşekkürler""",
    "vi": """là và của có không được cho một những các trong với này người đã tôi bạn để khi
        thì như cũng đến làm ra nào gì sao thế nhưng rất vì về từ""",
    "id": """yang dan di ke dari ini itu dengan untuk tidak ada saya aku kamu anda apa
        bagaimana kenapa mengapa bisa akan sudah juga atau pada karena dalam mereka kami kita
        tolong terima kasih""",
    "sv": """och att det som en är på för med inte jag har av till den du vi ni han hon men om
        eller kan ska vill hur varför var vad när min mitt mina din ditt dina också från
        mycket tack hej detta denna""",
    "da": """og at det som en er på for med ikke jeg har af til den du vi han hun men om eller
        kan skal vil hvordan hvorfor hvad hvornår min mit mine din dit dine også fra meget tak
        hej dette denne""",
    "cs": """a je se na v že to s z do jsem jsi není jak co ale pro by být mi mě mně ty on ona
        my vy jejich jeho její proč kde kdy který která které prosím děkuji taky také můžeš
        můžu chci""",
    "ro": """și în de la cu pe că nu se este un o să din care pentru sunt mai ce cum dar eu tu
        el ea noi voi ei lor meu mea tău ta unde când de ce poți pot vreau vă rog mulțumesc""",
    "hu": """a az és hogy nem is egy van meg de ez azt mi mit ki hol mikor miért hogyan én te
        ő mi ti ők vagyok vagy lesz kell lehet szeretnék kérlek köszönöm ezt azt nekem""",
    "fi": """ja on ei se että en olen oli mutta kun jos niin kuin mitä miten miksi missä minä
        sinä hän me te he minun sinun tämä tuo voi voitko haluan kiitos myös""",
}.items()}
_FUNCTION_WORDS = {lang: words if lang == "en" else frozenset(w for w in words - _WORDS["en"] if len(w) > 1)
                   for lang, words in _WORDS.items()}
# Letters, with an apostrophe inside a word (English "don't", French "c'est").
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    for prefix, script in _SCRIPT_OF_NAME:
        if name.startswith(prefix):
            return script
    return "other"


def _latin_language(text: str, min_share: float) -> str:
    words = [w.lower() for w in _WORD.findall(text.replace("’", "'"))]
    if len(words) <= 2:
        # One- or two-word texts rarely contain a function word; count them as English.
        return "en" if words else "latin"
    hits = {lang: sum(1 for w in words if w in listed) for lang, listed in _FUNCTION_WORDS.items()}
    best = max(hits, key=lambda lang: (hits[lang], lang == "en"))
    # Another language needs two of its words: one ("com" in a URL, "die" in a shell script)
    # is chance.
    enough = hits[best] >= (1 if best == "en" else 2)
    return best if enough and hits[best] / len(words) >= min_share else "latin"


@dataclass(frozen=True)
class LanguageReading:
    """A text's language: ``name`` (a code, ``latin``, ``other`` or ``unknown``), the dominant
    script's share of the letters, the letters per script, and ``mixed`` when a second script
    has at least ``mixed_min_share`` of them."""

    name: str
    share: float
    scripts: dict[str, int] = field(default_factory=dict)
    mixed_share: float | None = None

    @property
    def named(self) -> bool:
        """A language was identified (not ``latin``, ``other`` or ``unknown``)."""
        return self.name not in ("latin", "other", "unknown")


def read_language(text: str, settings: LanguageSettings) -> LanguageReading:
    scripts = Counter(s for s in map(_script, text) if s is not None)
    total = sum(scripts.values())
    if total == 0:
        return LanguageReading("unknown", 1.0)
    # Japanese mixes kanji (han) with kana: with any kana, han letters count as Japanese.
    if "kana" in scripts and "han" in scripts:
        scripts["kana"] += scripts.pop("han")
    ranked = scripts.most_common()
    top_script, top_count = ranked[0]
    name = (_latin_language(text, settings.min_stopword_share) if top_script == "latin"
            else _LANGUAGE_OF_SCRIPT.get(top_script, "other"))
    second = ranked[1][1] / total if len(ranked) > 1 else 0.0
    return LanguageReading(name, top_count / total, dict(scripts),
                           second if second >= settings.mixed_min_share else None)


class LanguageSignal:
    type = "language"

    def __init__(self, settings: LanguageSettings):
        self._settings = settings

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        reading = read_language(ctx.user_text, self._settings)
        if not reading.scripts:
            return [SignalMatch(self.type, "unknown", 1.0, source="rule:script")]
        matches = [SignalMatch(self.type, reading.name, reading.share, source="rule:script",
                               details={"scripts": reading.scripts})]
        if reading.mixed_share is not None:
            matches.append(SignalMatch(self.type, "mixed", reading.mixed_share, source="rule:script"))
        return matches


def build(deps: "SignalDeps") -> LanguageSignal:
    return LanguageSignal(deps.settings.language)
