"""Settings of the trained intent head (``routing.signals.intent.head``).

Kept apart from ``routing.py`` (which references it) so the trained router's knobs sit in one
small place. Like every config module it forbids unknown keys: a typo fails at load with its path.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from .base import TASK_TYPES as _INTENTS
from .base import Strict as _Strict


def _check_intents(value: dict[str, float]) -> dict[str, float]:
    for intent, number in value.items():
        if intent not in _INTENTS:
            raise ValueError(f"{intent!r} is not one of {list(_INTENTS)}")
        if not 0 <= number <= 1:
            raise ValueError(f"{intent}: {number} is not a probability")
    return value


class IntentHeadTraining(_Strict):
    """How ``horizon train-router`` builds the head (read only by that command)."""

    # Training-only sentences and compositions beside the templates (the templates are
    # training data too). Files or directories of *.yaml.
    training_files: list[str] = Field(default_factory=lambda: ["configs/intents/training"])
    # Inverse L2 strength of the multinomial logistic regression.
    c: float = Field(4.0, gt=0)
    # Neighbour features: mean cosine of the k most similar training sentences per intent,
    # multiplied by knn_scale (puts them on the scale of the embedding's own coordinates);
    # the memory is stored as PCA codes of memory_dims dimensions, int8.
    knn_k: int = Field(5, ge=1)
    knn_scale: float = Field(5.0, gt=0)
    memory_dims: int = Field(128, ge=8)
    # Instruction view of texts of view_min_chars or more: the text around a pasted paragraph or
    # a quote, else the first and last sentence, cut to view_edge_chars
    # (serve_app/routing/intent_head.py, instruction_view).
    view_min_chars: int = Field(150, ge=1)
    view_edge_chars: int = Field(160, ge=10)
    # Class weights: "balanced" evens out intents with more training sentences.
    class_weight: Literal["balanced", "none"] = "balanced"
    # Share of each intent's training groups held out to report accuracy (then refit on all).
    holdout_fraction: float = Field(0.2, gt=0, lt=1)
    folds: int = Field(5, ge=2)
    seed: int = 17
    # Per-intent thresholds: the lowest probability at which the cross-validated precision of
    # the head's picks of that intent is at least this (escalation below it).
    target_precision: float = Field(0.9, gt=0, le=1)
    # Thresholds are clipped into [floor, ceiling].
    threshold_floor: float = Field(0.3, ge=0, le=1)
    threshold_ceiling: float = Field(0.9, ge=0, le=1)


class IntentHeadSettings(_Strict):
    """A classifier on the frozen sentence embedding, trained by ``horizon train-router``."""

    # Artifact (.npz) per embedding model, keyed by the embedding model's engine.model like the
    # thresholds: weights, intents, calibrated bars, the embedding model and the fingerprint of
    # the template and training files it was trained on. A profile whose embedding model has no
    # entry (BGE-M3 on the fleet) keeps the top-k template cosine. A stale artifact (files
    # changed since) or one trained on another embedding model refuses to load.
    artifacts: dict[str, str] = Field(default_factory=dict)
    # Per-intent probability bars that override the artifact's calibrated ones (e.g. a stricter
    # safety bar: a safety pick refuses the request).
    min_confidence: dict[str, float] = Field(default_factory=dict)
    # Safety evidence (``routing.signals.intent.fail_closed``): an escalated request whose head
    # probability of safety is at least this, and that the classifier does not settle, is
    # treated as safety. The head's probability scale, not the cosine one. 0.55: on the
    # development and earlier blind sets (967 requests) the six harmful requests that escalate
    # have 0.58-0.69 and the escalating benign ones 0.50-0.59 (docs/routing.md). Under 0.5 it
    # also escalates a sure pick of another intent that holds that much safety evidence: a
    # safety-first operating point, which refuses more look-alikes (every floor's row on the
    # development sets: docs/routing.md, "The safety floor as an operating point").
    safety_evidence: float = Field(0.55, ge=0, le=1)
    training: IntentHeadTraining = Field(default_factory=IntentHeadTraining)

    @field_validator("min_confidence")
    @classmethod
    def _known_intents(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_intents(value)

    def artifact_for(self, embedding_model: Optional[str]) -> Optional[str]:
        return self.artifacts.get(embedding_model) if embedding_model else None
