"""Grounding: score how much each panel answer agrees with the others (and the context).

Runs after the quorum check and before the judge. Each usable answer is embedded with the
fleet's embedding deployment; its score is the mean cosine similarity to the other answers
(``panel``), the similarity to the request's context messages (``context``: system prompts and
tool results), or a blend (``hybrid``: context when the request has any, mixed with panel
agreement by ``context_weight``). Negative similarities count as 0, so scores lie in [0, 1].

This measures AGREEMENT, not truth: three answers can agree on the same mistake while a lone
dissenter is right. That is why the default policy only weights answers; ``filter`` drops those
under ``min_score`` (always keeping the ``min_keep`` best) and no second quorum check follows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..fleet.protocol import EmbeddingClient
from ..config.fusion import GroundingSettings
from ..errors import HorizonError, ModelUnavailable, UpstreamError
from .messages import context_text
from .panel import MemberResult


@dataclass
class GroundingReport:
    kept: list[MemberResult]
    # Panel index -> score; absent when an answer could not be scored (no peers, no context).
    scores: dict[int, float] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    applied: bool = True   # False when the embedder failed and on_error: skip fell back


def _unit(vectors: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def agreement_scores(answer_vectors: np.ndarray, context_vector: Optional[np.ndarray],
                     reference: str, context_weight: float
                     ) -> tuple[list[Optional[float]], list[Optional[float]], list[Optional[float]], str]:
    """(score, panel agreement, context agreement) per answer and the reference actually used."""
    n = len(answer_vectors)
    sims = np.clip(answer_vectors @ answer_vectors.T, 0.0, 1.0)
    panel: list[Optional[float]] = [
        float((sims[i].sum() - sims[i, i]) / (n - 1)) if n > 1 else None for i in range(n)]
    context: list[Optional[float]] = [None] * n
    if context_vector is not None:
        context = [float(np.clip(v @ context_vector, 0.0, 1.0)) for v in answer_vectors]
    used = reference
    if reference == "context" and context_vector is None:
        used = "panel"   # nothing to compare against: fall back to mutual agreement
    if reference == "hybrid":
        used = "hybrid" if context_vector is not None else "panel"
    scores: list[Optional[float]] = []
    for p, c in zip(panel, context):
        if used == "panel":
            scores.append(p)
        elif used == "context":
            scores.append(c)
        else:  # hybrid with context
            scores.append(c if p is None else (1 - context_weight) * p + context_weight * c)
    return scores, panel, context, used


def _select(members: list[MemberResult], scores: dict[int, float],
            settings: GroundingSettings) -> set[int]:
    """Indices kept by the filter policy: above min_score, never fewer than min_keep."""
    if settings.policy != "filter":
        return {m.index for m in members}
    kept = {m.index for m in members if m.index not in scores or scores[m.index] >= settings.min_score}
    ranked = sorted(members, key=lambda m: scores.get(m.index, 1.0), reverse=True)
    for member in ranked:
        if len(kept) >= settings.min_keep:
            break
        kept.add(member.index)
    return kept


async def ground(members: list[MemberResult], request: dict[str, Any],
                 settings: GroundingSettings, embedder: EmbeddingClient | None) -> GroundingReport:
    started = time.perf_counter()
    base = {"enabled": True, "reference": settings.reference, "policy": settings.policy,
            "min_score": settings.min_score, "min_keep": settings.min_keep,
            "measures": "agreement between answers (and with the request context), not truth"}
    context = context_text(list(request.get("messages") or []))
    texts = [m.text for m in members] + ([context] if context and settings.reference != "panel" else [])
    try:
        if embedder is None:
            raise ModelUnavailable("no embedding deployment is configured for grounding")
        vectors = await embedder.embed(texts)
        if len(vectors) != len(texts):
            raise UpstreamError(f"embedder returned {len(vectors)} vectors for {len(texts)} texts")
    except Exception as exc:
        if settings.on_error == "fail":
            if isinstance(exc, HorizonError):
                raise
            raise UpstreamError(f"grounding failed: {exc}") from exc
        trace = {**base, "applied": False, "error": str(exc) or type(exc).__name__,
                 "ms": (time.perf_counter() - started) * 1000}
        return GroundingReport(kept=list(members), trace=trace, applied=False)

    matrix = _unit(vectors)
    answer_vectors = matrix[:len(members)]
    context_vector = matrix[len(members)] if len(texts) > len(members) else None
    scores, panel, ctx, used = agreement_scores(answer_vectors, context_vector,
                                                settings.reference, settings.context_weight)
    by_index = {m.index: s for m, s in zip(members, scores) if s is not None}
    kept_indices = _select(members, by_index, settings)
    trace = {**base, "applied": True, "reference_used": used, "responses": [
        {"model": m.model, "index": m.index,
         "score": None if s is None else round(s, 4),
         "panel_agreement": None if p is None else round(p, 4),
         "context_agreement": None if c is None else round(c, 4),
         "dropped": m.index not in kept_indices}
        for m, s, p, c in zip(members, scores, panel, ctx)],
        "ms": (time.perf_counter() - started) * 1000}
    return GroundingReport(kept=[m for m in members if m.index in kept_indices],
                           scores=by_index, trace=trace)
