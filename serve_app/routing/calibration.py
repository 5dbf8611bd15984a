"""Calibrate an embedding model's intent threshold on the intent templates (leave-one-out).

Each template is scored against all *other* templates, exactly as a request would be, giving
(true intent, best intent, best score) for data the index has not seen as itself. For each
candidate threshold the table shows how many templates would be decided by the embedding
(coverage = 1 - escalation rate) and how often those decisions are right (precision).

The recommended threshold maximises the expected routing accuracy
``coverage x precision + (1 - coverage) x classifier_accuracy`` (an escalated request is right
as often as the k2 classifier is) among thresholds whose escalation rate stays within the
budget (SPEC: <= 15 %; every escalation costs a k2 call). Escalating only pays where the
embedding is less accurate than k2, which is exactly the band under the threshold.

Run: ``python -m serve_app.routing.calibration --config configs/sim.yaml``.
The evaluation set (configs/eval/) is never used here, so the accuracy measured on it stays honest.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass

import numpy as np

from ..fleet.protocol import EmbeddingClient
from ..config.arguments import fraction, positive_number
from ..config.loader import ConfigError, load_config
from ..config.routing import IntentSignalSettings
from .datafiles import IntentTemplates, load_templates
from .signals.intent import IntentIndex


@dataclass(frozen=True)
class CalibrationRow:
    threshold: float
    coverage: float
    precision: float
    expected_accuracy: float


def leave_one_out(templates: IntentTemplates, matrix: np.ndarray,
                  settings: IntentSignalSettings) -> list[tuple[str, str, float]]:
    """(true intent, predicted intent, score) for each template scored without itself."""
    out = []
    texts, intents = list(templates.texts), list(templates.intents)
    for i in range(len(texts)):
        keep = [j for j in range(len(texts)) if j != i]
        rest = IntentTemplates(tuple(texts[j] for j in keep), tuple(intents[j] for j in keep))
        index = IntentIndex(rest, matrix[keep], settings.aggregation, settings.top_k,
                            settings.hubness_penalty, settings.hubness_neighbours)
        scores = index.scores(matrix[i])
        out.append((intents[i], scores.best, scores.score))
    return out


def sweep(results: list[tuple[str, str, float]], thresholds: np.ndarray,
          classifier_accuracy: float) -> list[CalibrationRow]:
    rows = []
    for t in thresholds:
        decided = [(true, pred) for true, pred, score in results if score >= t]
        coverage = len(decided) / len(results)
        precision = sum(1 for true, pred in decided if true == pred) / len(decided) if decided else 1.0
        expected = coverage * precision + (1 - coverage) * classifier_accuracy
        rows.append(CalibrationRow(round(float(t), 3), coverage, precision, expected))
    return rows


def recommend(rows: list[CalibrationRow], max_escalation: float) -> CalibrationRow:
    """Best expected accuracy within the escalation budget; ties go to fewer escalations."""
    within = [r for r in rows if 1 - r.coverage <= max_escalation] or [max(rows, key=lambda r: r.coverage)]
    return max(within, key=lambda r: (round(r.expected_accuracy, 4), r.coverage))


async def calibrate(embedder: EmbeddingClient, settings: IntentSignalSettings, thresholds: np.ndarray,
                    classifier_accuracy: float) -> tuple[list[tuple[str, str, float]], list[CalibrationRow]]:
    templates = load_templates(settings.template_files)
    vectors = await embedder.embed(list(templates.texts))
    matrix = np.asarray(vectors, dtype=np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    results = leave_one_out(templates, matrix, settings)
    return results, sweep(results, thresholds, classifier_accuracy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serve_app.routing.calibration")
    parser.add_argument("--config", required=True)
    parser.add_argument("--classifier-accuracy", type=fraction, default=0.90,
                        help="assumed accuracy of the k2 classifier on escalated requests")
    parser.add_argument("--max-escalation", type=fraction, default=0.15)
    parser.add_argument("--min", type=fraction, default=0.10, help="lowest threshold tried")
    parser.add_argument("--max", type=fraction, default=0.90, help="highest threshold tried")
    parser.add_argument("--step", type=positive_number, default=0.02)
    args = parser.parse_args(argv)
    if args.min > args.max:
        parser.error(f"--min {args.min} is above --max {args.max}: no threshold to try")
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    from .offline import local_embedder

    settings = cfg.routing.signals.intent
    thresholds = np.arange(args.min, args.max + 1e-9, args.step)
    results, rows = asyncio.run(calibrate(local_embedder(cfg), settings, thresholds, args.classifier_accuracy))
    model = cfg.embedding_model.engine.model if cfg.embedding_model else "?"
    print(f"embedding model {model}; {len(results)} templates, leave-one-out, "
          f"aggregation {settings.aggregation} (top_k {settings.top_k}), hubness penalty "
          f"{settings.hubness_penalty}; assumed classifier accuracy {args.classifier_accuracy:.0%}")
    print(f"{'threshold':>9} {'coverage':>9} {'escalated':>9} {'precision':>9} {'expected':>9}")
    for r in rows:
        print(f"{r.threshold:>9.2f} {r.coverage:>9.1%} {1 - r.coverage:>9.1%} {r.precision:>9.1%} "
              f"{r.expected_accuracy:>9.1%}")
    best = recommend(rows, args.max_escalation)
    print(f"recommended threshold (best expected accuracy, escalation <= {args.max_escalation:.0%}): "
          f"{best.threshold:.2f} (coverage {best.coverage:.1%}, precision {best.precision:.1%}); "
          f"configured: {settings.threshold_for(model):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
