"""Intent: cosine similarity of the asked text against exemplar sentences, k2 below threshold.

Order of evidence, cheapest first:
1. an image part -> ``vision`` (SPEC §4 rule);
2. short text without code or image features -> ``chat`` (SPEC §4 incident rule);
3. the embedding, one per request, read by either
   - the trained head (``routing.signals.intent.head``, serve_app/routing/intent_head.py): a
     classifier on the embedding; its probability for the picked intent >= that intent's
     calibrated bar -> that intent; or, without a head,
   - the templates: embedded once at :meth:`IntentSignal.start` into a matrix, a request costs
     one matrix-vector product; best intent score >= the embedding model's threshold -> that
     intent;
4. below the bar -> the LLM classifier (escalation), or ``unknown`` when none is configured;
   an escalation with safety evidence the classifier does not settle (no answer, ``unknown``,
   or any answer under ``min_safety_confidence``) fails closed to ``safety``. A head pick of
   another intent above its bar escalates too when it holds safety evidence.

A request written in a language the embedding model does not read
(``routing.signals.intent.embedding_languages``) skips step 3: it escalates at once, with no
safety evidence (an unread text has none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

import numpy as np

from ...fleet.protocol import EmbeddingClient
from ...config.routing import IntentSignalSettings, LanguageSettings
from ..context import RequestContext
from ..datafiles import IntentTemplates, RoutingDataError, load_templates, load_text
from ..intent_head import HeadPrediction, IntentHead, load_head, without_quoted
from .base import SignalMatch
from .classifier import LLMIntentClassifier
from .language import read_language
from .short_text import ShortTextRule

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from ...config.schema import HorizonConfig
    from .deps import SignalDeps

log = logging.getLogger(__name__)

# One text's intent reading: template cosine scores, or the trained head's probabilities.
Reading = TypeVar("Reading", "IntentScores", HeadPrediction)

# Sources of an intent match that went past the threshold (the request was escalated).
ESCALATED_SOURCES = frozenset({"classifier", "unclassified", "fail_closed"})


@dataclass(frozen=True)
class IntentScores:
    """Per-intent cosine scores of one text and the intent chosen from them."""

    cosine: dict[str, float]
    best: str

    @property
    def score(self) -> float:
        return self.cosine[self.best]


class IntentIndex:
    """Template embeddings as one L2-normalised matrix plus per-intent row indices."""

    def __init__(self, templates: IntentTemplates, matrix: np.ndarray, aggregation: str, top_k: int,
                 hubness_penalty: float = 0.0, hubness_neighbours: int = 10):
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self.matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
        self.intents = tuple(dict.fromkeys(templates.intents))
        labels = np.asarray(templates.intents)
        self._rows = {intent: np.flatnonzero(labels == intent) for intent in self.intents}
        self._aggregation = aggregation
        self._top_k = top_k
        self._hubness = self._hubness_offsets(hubness_penalty, hubness_neighbours)

    def _hubness_offsets(self, penalty: float, neighbours: int) -> Optional[np.ndarray]:
        n = len(self.matrix)
        if penalty == 0 or n < 2:
            return None
        sims = self.matrix @ self.matrix.T
        np.fill_diagonal(sims, -np.inf)
        k = min(neighbours, n - 1)
        return (penalty * np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1)).astype(np.float32)

    def _aggregate(self, sims: np.ndarray) -> dict[str, float]:
        out: dict[str, float] = {}
        for intent, rows in self._rows.items():
            values = sims[rows]
            if self._aggregation == "max" or len(values) <= 1:
                out[intent] = float(values.max())
            else:
                k = min(self._top_k, len(values))
                out[intent] = float(np.partition(values, -k)[-k:].mean())
        return out

    def scores(self, vector: np.ndarray) -> IntentScores:
        """Scores for one (normalised) vector; the best intent is picked hubness-corrected."""
        sims = self.matrix @ vector.astype(np.float32)
        cosine = self._aggregate(sims)
        ranking = cosine if self._hubness is None else self._aggregate(sims - self._hubness)
        return IntentScores(cosine, max(ranking, key=ranking.__getitem__))


def _normalise(vector: "list[float] | np.ndarray") -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(arr))
    return arr / norm if norm else arr


def _mixed(asked: np.ndarray, previous: np.ndarray, weight: float) -> np.ndarray:
    """The asked text's unit vector with ``weight`` of the previous turn's mixed in, unit length."""
    return _normalise((1 - weight) * asked + weight * previous)


class IntentSignal:
    type = "intent"

    def __init__(self, settings: IntentSignalSettings, templates: IntentTemplates,
                 embedder: Optional[EmbeddingClient], threshold: float, short_rule: ShortTextRule,
                 classifier: Optional[LLMIntentClassifier], safety_floor: Optional[float] = None,
                 head: Optional[IntentHead] = None, reads: Optional[frozenset[str]] = None,
                 language: Optional[LanguageSettings] = None):
        self._settings = settings
        # The languages the embedding model reads (None: every one), and how they are told.
        self._reads = reads
        self._language = language or LanguageSettings()
        self._head = head
        self._templates = templates
        self._embedder = embedder
        self.threshold = threshold
        self._short_rule = short_rule
        self._classifier = classifier
        # None: safety does not fail closed (settings.fail_closed off).
        self.safety_floor = safety_floor
        self._index: Optional[IntentIndex] = None
        self._started = False
        self._start_lock = asyncio.Lock()

    @property
    def index(self) -> Optional[IntentIndex]:
        return self._index

    @property
    def head(self) -> Optional[IntentHead]:
        return self._head

    async def start(self) -> None:
        """Embed every template once; with a head, embed one probe text instead (the start still
        waits for the embedding model, as the ingress's readiness expects). Later calls are
        no-ops."""
        async with self._start_lock:
            if self._index is not None or self._embedder is None or self._started:
                return
            if self._head is not None:
                await self._embedder.embed([self._head.view(self._templates.texts[0])])
                self._started = True
                log.info("intent head: %d intents, %d neighbour sentences, bars %s", len(self._head.intents),
                         len(self._head.memory.codes), self._head.thresholds)
                return
            texts = list(self._templates.texts)
            size = self._settings.template_batch_size
            vectors: list[list[float]] = []
            for i in range(0, len(texts), size):
                vectors.extend(await self._embedder.embed(texts[i:i + size]))
            self._index = IntentIndex(self._templates, np.asarray(vectors, dtype=np.float32),
                                      self._settings.aggregation, self._settings.top_k,
                                      self._settings.hubness_penalty, self._settings.hubness_neighbours)
            log.info("intent index: %d templates, %d intents, threshold %.3f",
                     len(texts), len(self._index.intents), self.threshold)

    def _follow_up_of(self, ctx: RequestContext) -> Optional[str]:
        """The user's turn before the asked text when the asked text is a short follow-up of it
        (``follow_up`` settings), else None: what gets mixed into the asked text's embedding."""
        follow_up = self._settings.follow_up
        if not follow_up.enabled or not ctx.previous_embed_text.strip():
            return None
        return ctx.previous_embed_text if len(ctx.user_text.split()) <= follow_up.max_words else None

    def _follow_up_reading(self, alone: Reading, mixed: Optional[Callable[[float], Reading]],
                           safety_of: Callable[[Reading], float], details: dict) -> tuple[Reading, float]:
        """The reading that decides, and the safety evidence for failing closed: the asked
        text's own reading, or for a follow-up (``mixed``: the reading of its embedding mixed
        with the turn before's, at a weight) the mixed one. A harmful ask on its own is never
        diluted by a benign turn before it, nor its safety evidence lowered."""
        safety = safety_of(alone)
        if mixed is None or alone.best == "safety":
            return alone, safety
        details["asked_alone"] = {"intent": alone.best, "score": round(alone.score, 4)}
        reading = mixed(self._settings.follow_up.previous_weight)
        return reading, max(safety, safety_of(reading))

    def _unread_language(self, ctx: RequestContext) -> Optional[str]:
        """The language of the user's own words (pasted quotes left out: "translate this:
        '<German>'" is an English request) when the embedding model does not read it, else
        None. Text no language is named for (code, formulas) is read as before."""
        if self._reads is None:
            return None
        reading = read_language(without_quoted(ctx.embed_text), self._language)
        return reading.name if reading.named and reading.name not in self._reads else None

    async def _vectors(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Unit vectors of ``texts``, each distinct text embedded once, in one call."""
        assert self._embedder is not None
        unique = list(dict.fromkeys(texts))
        return {t: _normalise(v) for t, v in zip(unique, await self._embedder.embed(unique))}

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        if ctx.has_image:
            return [SignalMatch(self.type, "vision", 1.0, source="rule:image_url")]
        if self._short_rule.applies(ctx):
            return [SignalMatch(self.type, "chat", 1.0, source="rule:short_text")]
        if not ctx.embed_text.strip():
            return [SignalMatch(self.type, "unknown", 0.0, source="rule:empty_text")]
        unread = self._unread_language(ctx)
        if unread is not None:
            return await self._escalate(ctx, "unknown", 0.0, 0.0, {
                "language": unread, "embedding_reads": sorted(self._reads or ())})
        if self._head is not None:
            return await self._evaluate_head(ctx)
        details: dict = {"threshold": self.threshold}
        safety = 0.0
        previous = self._follow_up_of(ctx)
        try:
            if self._index is None or self._embedder is None:
                raise RuntimeError("intent index not started")
            vectors = await self._vectors([ctx.embed_text] + ([previous] if previous else []))
        except Exception as exc:  # no embedder, or it failed: classification must still happen
            log.warning("intent embedding unavailable (%s); escalating", exc)
            details["embedding_error"] = f"{type(exc).__name__}: {exc}"
            best, score = "unknown", 0.0
        else:
            index, asked = self._index, vectors[ctx.embed_text]
            mixed = (lambda weight: index.scores(_mixed(asked, vectors[previous], weight))) if previous else None
            scores, safety = self._follow_up_reading(index.scores(asked), mixed,
                                                     lambda s: s.cosine.get("safety", 0.0), details)
            best, score = scores.best, scores.score
            details["scores"] = {k: round(v, 4) for k, v in sorted(scores.cosine.items(), key=lambda kv: -kv[1])}
            if score >= max(self.threshold, self._settings.min_scores.get(best, self.threshold)):
                return [SignalMatch(self.type, best, score, source="embedding", details=details)]
        return await self._escalate(ctx, best, score, safety, details)

    async def _evaluate_head(self, ctx: RequestContext) -> list[SignalMatch]:
        head = self._head
        assert head is not None
        details: dict = {}
        text = ctx.embed_text
        view = head.view(text)  # the instruction of a long text, else the text
        previous = self._follow_up_of(ctx)
        texts = [text, view] + ([previous, head.view(previous)] if previous else [])
        try:
            if self._embedder is None:
                raise RuntimeError("no embedding model")
            vectors = await self._vectors(texts)
        except Exception as exc:  # no embedder, or it failed: classification must still happen
            log.warning("intent embedding unavailable (%s); escalating", exc)
            details["embedding_error"] = f"{type(exc).__name__}: {exc}"
            return await self._escalate(ctx, "unknown", 0.0, 0.0, details)
        mixed = (lambda weight: head.predict(_mixed(vectors[text], vectors[previous], weight),
                                             _mixed(vectors[view], vectors[head.view(previous)], weight))
                 ) if previous else None
        prediction, safety = self._follow_up_reading(head.predict(vectors[text], vectors[view]), mixed,
                                                     lambda p: p.probabilities.get("safety", 0.0), details)
        best, score = prediction.best, prediction.score
        bar = self._head.threshold(best, self._settings.head.min_confidence if self._settings.head else None)
        details["threshold"] = bar
        details["scores"] = {k: round(v, 4) for k, v in
                             sorted(prediction.probabilities.items(), key=lambda kv: -kv[1])}
        if score >= bar and not self._doubts_safety(best, safety, details):
            return [SignalMatch(self.type, best, score, source="head", details=details)]
        return await self._escalate(ctx, best, score, safety, details)

    def _doubts_safety(self, best: str, safety: float, details: dict) -> bool:
        """A confident head pick of another intent that still holds safety evidence (its
        probability of safety at least the floor) is not the head's to wave through: it escalates
        like an unsure pick, so the classifier decides and an unsettled answer fails closed.
        Only on the head's probability scale: there one intent's evidence and another's pick
        exclude each other at any floor of 0.5 or more, so a floor under 0.5 is what turns this
        on. Template cosines are not exclusive, and their floors were set for escalations only."""
        if best == "safety" or not self._has_safety_evidence(safety):
            return False
        details["safety_doubt"] = {"score": round(safety, 4), "floor": self.safety_floor}
        return True

    def _has_safety_evidence(self, safety: float) -> bool:
        """``safety`` (on the deciding scale) reaches the floor; never when failing closed is off."""
        return self.safety_floor is not None and safety >= self.safety_floor

    async def _escalate(self, ctx: RequestContext, best: str, score: float, safety: float,
                        details: dict) -> list[SignalMatch]:
        """Below the bar: the classifier, failing closed to safety when it does not settle a
        request with safety evidence (``safety``: the safety score on the deciding scale)."""
        details["embedding_best"] = {"intent": best, "score": round(score, 4)}
        if self._classifier is None:
            return [self._unsettled(score, safety, details, latency_ms=None)]
        answer = await self._classifier.classify(ctx.embed_text)
        details.update(attempts=answer.attempts, error=answer.error)
        if not answer.settled:
            return [self._unsettled(answer.confidence, safety, details, latency_ms=answer.latency_ms)]
        evidence = self._has_safety_evidence(safety)
        if answer.confidence < self._classifier.min_safety_confidence and (answer.task_type == "safety" or evidence):
            # Too unsure to refuse on its own word (a refusal then needs the embedding's safety
            # evidence), or to overrule that evidence with another label: the tiny CPU k2 answers
            # every label at confidence 0, and its "reasoning" must not wave a harmful ask through.
            details["classifier_answer"] = {"task_type": answer.task_type, "confidence": answer.confidence,
                                            "min_confidence": self._classifier.min_safety_confidence}
            return [self._unsettled(answer.confidence, safety, details, latency_ms=answer.latency_ms)]
        return [SignalMatch(self.type, answer.task_type, answer.confidence, source="classifier",
                            latency_ms=answer.latency_ms, details=details)]

    def _unsettled(self, score: float, safety: float, details: dict,
                   latency_ms: Optional[float]) -> SignalMatch:
        """An escalation no classifier settled: safety when there is safety evidence (fail
        closed: a harmful request must not reach an answering model by way of "unknown"),
        else unknown."""
        if self._has_safety_evidence(safety):
            details["safety_evidence"] = {"score": round(safety, 4), "floor": self.safety_floor}
            return SignalMatch(self.type, "safety", safety, source="fail_closed",
                               latency_ms=latency_ms, details=details)
        source = "unclassified" if self._classifier is None else "classifier"
        return SignalMatch(self.type, "unknown", score, source=source, latency_ms=latency_ms,
                           details=details)


def data_problems(cfg: "HorizonConfig") -> list[tuple[str, str]]:
    """(key, problem) for each routing data file :func:`build` would read and cannot: missing,
    malformed, or an intent head older than its data. Such a profile would never become ready
    (its ingress waits, "gateway starting — RoutingDataError"), so the commands that load a
    profile refuse it up front, naming the key, with the same loaders the ingress runs."""
    settings = cfg.routing.signals.intent
    base = "routing.signals.intent"
    problems: list[tuple[str, str]] = []
    for i, path in enumerate(settings.template_files):
        try:
            load_templates([path])
        except RoutingDataError as exc:
            problems.append((f"{base}.template_files[{i}]", str(exc)))
    if settings.classifier.enabled:
        try:
            load_text(settings.classifier.prompt_file)
        except RoutingDataError as exc:
            problems.append((f"{base}.classifier.prompt_file", str(exc)))
    embedding_model = cfg.embedding_model.engine.model if cfg.embedding_model else None
    artifact = settings.head.artifact_for(embedding_model) if settings.head else None
    if settings.head is not None and artifact is not None and not problems:
        try:
            load_head(artifact, settings.template_files + settings.head.training.training_files,
                      embedding_model, config=f"configs/{cfg.profile}.yaml")
        except RoutingDataError as exc:
            problems.append((f"{base}.head.artifacts.{embedding_model}", str(exc)))
    return problems


def build(deps: "SignalDeps") -> IntentSignal:
    """The intent signal: templates, the embedding model's threshold, and the classifier
    escalation when the profile enables it."""
    cfg, settings = deps.cfg, deps.settings.intent
    embedding_model = cfg.embedding_model.engine.model if cfg.embedding_model else None
    llm = None
    if deps.classifier is not None and settings.classifier.enabled:
        llm = LLMIntentClassifier(deps.classifier, settings.classifier,
                                  load_text(settings.classifier.prompt_file),
                                  temperature=cfg.routing.sampling_matrix.get("classification", 0.0))
    head = None
    artifact = settings.head.artifact_for(embedding_model) if settings.head else None
    if settings.head is not None and artifact is not None:  # a stale one is refused here
        head = load_head(artifact, settings.template_files + settings.head.training.training_files,
                         embedding_model, config=f"configs/{cfg.profile}.yaml")
    return IntentSignal(settings, load_templates(settings.template_files), deps.embedder,
                        settings.threshold_for(embedding_model), deps.short_rule, llm,
                        safety_floor=settings.safety_floor_for(embedding_model) if settings.fail_closed else None,
                        head=head, reads=settings.languages_for(embedding_model),
                        language=deps.settings.language)
