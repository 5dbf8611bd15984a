"""``horizon train-router``: fit the intent head on the templates and the training-only files.

Data: every template sentence (configs/intents/*.yaml) plus the training files
(``routing.signals.intent.head.training.training_files``, default configs/intents/training/):
plain ``examples`` of one intent, and ``compositions``, frames with ``{pool}`` placeholders
filled from named ``pools`` (an instruction around a pasted text, a role-play wrapper around a
request). Expansion is deterministic, so the same files always give the same training set.

Procedure (on this CPU: about 20 s of embedding and 10 s of fitting on two idle cores):
1. embed every training text and its instruction view with the profile's embedding model (the
   vectors the router will see);
2. hold out ``holdout_fraction`` of each intent's groups (a composition frame with all its
   fills is one group, so no sibling of a held-out text is trained on or in the neighbour
   memory) and report the accuracy of a head built from the rest: the honest figure for unseen
   sentences of the training distribution (the evaluation sets are never read here);
3. out-of-fold probabilities (``folds`` group folds, each head built without its fold)
   calibrate one probability bar per intent: the lowest at which the head's picks of that
   intent are at least ``target_precision`` right, clipped to [threshold_floor,
   threshold_ceiling];
4. build the head on everything and write the artifact with the bars, the embedding model and
   the fingerprint of the data files (serve_app/routing/intent_head.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import yaml

from ..fleet.protocol import EmbeddingClient
from ..config.intent_head import IntentHeadTraining
from ..config.base import TASK_TYPES
from ..config.schema import HorizonConfig
from .datafiles import RoutingDataError, data_files, load_templates
from .intent_head import IntentHead, NeighbourMemory, fingerprint, instruction_view

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_FILE_KEYS = {"intent", "description", "examples", "pools", "compositions"}


@dataclass(frozen=True)
class TrainingExample:
    text: str
    intent: str
    # Examples of one group are always on the same side of a split (a frame and its fills).
    group: str
    source: str  # "template" | "example" | "composed"


def _read_yaml(file: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise RoutingDataError(f"{file}: YAML syntax error: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - _FILE_KEYS:
        raise RoutingDataError(f"{file}: expected keys among {sorted(_FILE_KEYS)}, got {sorted(doc)}")
    return doc


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise RoutingDataError(f"{where}: expected a list of non-empty strings")
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v.strip():  # e.g. an unquoted "a: b" reads as a mapping
            raise RoutingDataError(f"{where}[{i}]: expected a non-empty string, got {v!r} (quote it)")
    return [v.strip() for v in value]


def load_training_set(template_files: Sequence[str], training_files: Sequence[str]) -> list[TrainingExample]:
    """Templates first, then each training file's examples and expanded compositions.

    Case-insensitive duplicates keep their first occurrence."""
    out: list[TrainingExample] = []
    seen: set[str] = set()

    def add(text: str, intent: str, group: str, source: str) -> None:
        key = " ".join(text.lower().split())
        if key not in seen:
            seen.add(key)
            out.append(TrainingExample(text, intent, group, source))

    templates = load_templates(list(template_files))
    for i, (text, intent) in enumerate(zip(templates.texts, templates.intents)):
        add(text, intent, f"template:{i}", "template")
    docs = [(file, _read_yaml(file)) for file in data_files(training_files)] if training_files else []
    pools: dict[str, list[str]] = {}
    for file, doc in docs:
        for name, values in (doc.get("pools") or {}).items():
            if name in pools:
                raise RoutingDataError(f"{file}: pool {name!r} is defined twice")
            pools[name] = _strings(values, f"{file}: pools.{name}")
    for file, doc in docs:
        intent = doc.get("intent")
        if intent is not None and intent not in TASK_TYPES:
            raise RoutingDataError(f"{file}: intent {intent!r} is not one of {list(TASK_TYPES)}")
        examples = _strings(doc.get("examples") or [], f"{file}: examples") if doc.get("examples") else []
        if examples and intent is None:
            raise RoutingDataError(f"{file}: examples need the file's intent")
        for i, text in enumerate(examples):
            add(text, intent, f"{file.name}:example:{i}", "example")
        for g, comp in enumerate(doc.get("compositions") or []):
            where = f"{file}: compositions[{g}]"
            if not isinstance(comp, dict) or set(comp) - {"intent", "frames", "per_frame"}:
                raise RoutingDataError(f"{where}: expected keys intent, frames, per_frame")
            comp_intent = comp.get("intent", intent)
            if comp_intent not in TASK_TYPES:
                raise RoutingDataError(f"{where}: intent {comp_intent!r} is not one of {list(TASK_TYPES)}")
            per_frame = comp.get("per_frame", 1)
            if not isinstance(per_frame, int) or per_frame < 1:
                raise RoutingDataError(f"{where}: per_frame must be a positive integer")
            for i, frame in enumerate(_strings(comp.get("frames"), f"{where}.frames")):
                names = list(dict.fromkeys(_PLACEHOLDER.findall(frame)))
                missing = [n for n in names if n not in pools]
                if missing:
                    raise RoutingDataError(f"{where}.frames[{i}]: unknown pool {missing[0]!r}")
                # Seeded by position only: the same files always expand to the same texts.
                rng = random.Random(f"{file.name}:{g}:{i}")
                fills = {n: rng.sample(pools[n], min(per_frame, len(pools[n]))) for n in names}
                for k in range(per_frame if names else 1):
                    text = frame
                    for n in names:
                        text = text.replace("{" + n + "}", fills[n][k % len(fills[n])])
                    add(text, comp_intent, f"{file.name}:{g}:{i}", "composed")
    return out


# --------------------------------------------------------------------------- fitting


def _fit(x: np.ndarray, y: np.ndarray, n_classes: int, settings: IntentHeadTraining) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression; (weights (d, k), bias (k,))."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=settings.c, max_iter=1000, solver="newton-cg",
                               class_weight="balanced" if settings.class_weight == "balanced" else None)
    model.fit(x, y)
    weights = np.zeros((x.shape[1], n_classes), dtype=np.float32)
    bias = np.full(n_classes, -1e4, dtype=np.float32)  # a class absent from training never wins
    for column, cls in enumerate(model.classes_):
        weights[:, cls] = model.coef_[column]
        bias[cls] = model.intercept_[column]
    return weights, bias


def group_split(examples: Sequence[TrainingExample], fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of held-out examples: ``fraction`` of each intent's groups, by seed."""
    rng = random.Random(seed)
    held: set[str] = set()
    for intent in TASK_TYPES:
        groups = sorted({e.group for e in examples if e.intent == intent})
        rng.shuffle(groups)
        held.update(groups[:max(1, round(fraction * len(groups)))] if groups else [])
    return np.array([e.group in held for e in examples])


def group_folds(examples: Sequence[TrainingExample], folds: int, seed: int) -> np.ndarray:
    """Fold number of each example; groups never straddle folds, intents spread evenly."""
    rng = random.Random(seed + 1)
    fold_of: dict[str, int] = {}
    for intent in TASK_TYPES:
        groups = sorted({e.group for e in examples if e.intent == intent})
        rng.shuffle(groups)
        for i, group in enumerate(groups):
            fold_of[group] = i % folds
    return np.array([fold_of[e.group] for e in examples])


def build_head(examples: Sequence[TrainingExample], whole: np.ndarray, view: np.ndarray,
               settings: IntentHeadTraining, embedding_model: str = "", data_fingerprint: str = "",
               rows: Optional[np.ndarray] = None) -> IntentHead:
    """A head trained on ``rows`` (default all): their vectors form its neighbour memory, and
    each row's own neighbour features leave out its group (as for a sentence never seen)."""
    intents = tuple(TASK_TYPES)
    rows = np.ones(len(examples), dtype=bool) if rows is None else rows
    idx = np.flatnonzero(rows)
    y = np.array([intents.index(examples[i].intent) for i in idx])
    groups = np.array([examples[i].group for i in idx])
    memory = NeighbourMemory.build(whole[idx], y, settings.memory_dims)
    head = IntentHead(intents=intents, weights=np.zeros((2 * whole.shape[1] + 2 * len(intents), len(intents)),
                                                        dtype=np.float32),
                      bias=np.zeros(len(intents), dtype=np.float32), memory=memory, thresholds={},
                      embedding_model=embedding_model, data_fingerprint=data_fingerprint,
                      knn_k=settings.knn_k, knn_scale=settings.knn_scale,
                      view_min_chars=settings.view_min_chars, view_edge_chars=settings.view_edge_chars)
    x = head.features(whole[idx], view[idx], exclude=groups[:, None] == groups[None, :])
    head.weights, head.bias = _fit(x, y, len(intents), settings)
    return head


def calibrate(probs: np.ndarray, y: np.ndarray, intents: Sequence[str],
              settings: IntentHeadTraining) -> dict[str, float]:
    """Per intent: the lowest bar at which the picks of that intent reach the target precision."""
    pred = probs.argmax(axis=1)
    top = probs.max(axis=1)
    bars: dict[str, float] = {}
    for k, intent in enumerate(intents):
        picked = pred == k
        bar = settings.threshold_ceiling
        for candidate in np.unique(np.concatenate([[settings.threshold_floor], top[picked]])):
            chosen = picked & (top >= candidate)
            if chosen.sum() and (y[chosen] == k).mean() >= settings.target_precision:
                bar = float(candidate)
                break
        bars[intent] = round(float(min(max(bar, settings.threshold_floor), settings.threshold_ceiling)), 4)
    return bars


@dataclass
class TrainingReport:
    examples: int
    by_intent: dict[str, int]
    holdout_examples: int
    holdout_accuracy: float
    holdout_decided: float          # share above its intent's bar
    holdout_decided_accuracy: float
    cv_accuracy: float
    thresholds: dict[str, float]
    embed_s: float
    fit_s: float

    def format(self) -> str:
        bars = ", ".join(f"{k} {v:.2f}" for k, v in self.thresholds.items())
        return (f"training examples: {self.examples} ({', '.join(f'{k} {v}' for k, v in self.by_intent.items())})\n"
                f"held-out split (never trained on, neighbours included): {self.holdout_examples} examples, "
                f"accuracy {self.holdout_accuracy:.1%}; above the bars {self.holdout_decided:.1%} of them, "
                f"{self.holdout_decided_accuracy:.1%} right\n"
                f"cross-validated accuracy ({len(self.thresholds)} intents, group folds): {self.cv_accuracy:.1%}\n"
                f"calibrated bars: {bars}\n"
                f"embedding {self.embed_s:.1f} s, fitting {self.fit_s:.1f} s")


def fit_head(examples: Sequence[TrainingExample], whole: np.ndarray, view: np.ndarray,
             settings: IntentHeadTraining, embedding_model: str, data_fingerprint: str,
             embed_s: float = 0.0) -> tuple[IntentHead, TrainingReport]:
    """Held-out figure, calibrated bars from out-of-fold probabilities, then the head refitted
    on everything."""
    started = time.perf_counter()
    intents = tuple(TASK_TYPES)
    y = np.array([intents.index(e.intent) for e in examples])
    held = group_split(examples, settings.holdout_fraction, settings.seed)
    held_head = build_head(examples, whole, view, settings, rows=~held)
    held_probs = held_head.probabilities(whole[held], view[held])
    folds = group_folds(examples, settings.folds, settings.seed)
    oof = np.zeros((len(examples), len(intents)), dtype=np.float32)
    for f in range(settings.folds):
        fold_head = build_head(examples, whole, view, settings, rows=folds != f)
        oof[folds == f] = fold_head.probabilities(whole[folds == f], view[folds == f])
    bars = calibrate(oof, y, intents, settings)
    held_pred = held_probs.argmax(axis=1)
    held_bar = np.array([bars[intents[p]] for p in held_pred])
    decided = held_probs.max(axis=1) >= held_bar
    head = build_head(examples, whole, view, settings, embedding_model, data_fingerprint)
    head.thresholds = bars
    report = TrainingReport(
        examples=len(examples), by_intent={i: int((y == k).sum()) for k, i in enumerate(intents)},
        holdout_examples=int(held.sum()), holdout_accuracy=float((held_pred == y[held]).mean()),
        holdout_decided=float(decided.mean()),
        holdout_decided_accuracy=float((held_pred[decided] == y[held][decided]).mean()) if decided.any() else 0.0,
        cv_accuracy=float((oof.argmax(axis=1) == y).mean()), thresholds=bars, embed_s=embed_s,
        fit_s=time.perf_counter() - started)
    head.metadata = {"training": settings.model_dump(), "examples": report.examples, "by_intent": report.by_intent,
                     "holdout_accuracy": round(report.holdout_accuracy, 4),
                     "cv_accuracy": round(report.cv_accuracy, 4)}
    return head, report


async def embed_texts(embedder: EmbeddingClient, texts: Sequence[str], batch: int = 64) -> np.ndarray:
    vectors: list[list[float]] = []
    for i in range(0, len(texts), batch):
        vectors.extend(await embedder.embed(list(texts[i:i + batch])))
    matrix = np.asarray(vectors, dtype=np.float32)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


async def embed_views(embedder: EmbeddingClient, texts: Sequence[str],
                      settings: IntentHeadTraining) -> tuple[np.ndarray, np.ndarray]:
    """Whole-text and instruction-view vectors; a text that is its own view is embedded once."""
    views = [instruction_view(t, settings.view_min_chars, settings.view_edge_chars) for t in texts]
    distinct = list(dict.fromkeys([*texts, *views]))
    vectors = await embed_texts(embedder, distinct)
    row = {t: i for i, t in enumerate(distinct)}
    return vectors[[row[t] for t in texts]], vectors[[row[v] for v in views]]


def data_paths(cfg: HorizonConfig) -> list[str]:
    intent = cfg.routing.signals.intent
    head = intent.head
    return list(intent.template_files) + (list(head.training.training_files) if head else [])


async def train(cfg: HorizonConfig, embedder: EmbeddingClient,
                training: Optional[IntentHeadTraining] = None) -> tuple[IntentHead, TrainingReport]:
    intent = cfg.routing.signals.intent
    if intent.head is None:
        raise ValueError("the profile has no routing.signals.intent.head section (artifacts, training settings)")
    settings = training or intent.head.training
    if cfg.embedding_model is None:
        raise ValueError("the profile has no embedding model (backend: embedding)")
    examples = load_training_set(intent.template_files, settings.training_files)
    started = time.perf_counter()
    whole, view = await embed_views(embedder, [e.text for e in examples], settings)
    embed_s = time.perf_counter() - started
    return fit_head(examples, whole, view, settings, cfg.embedding_model.engine.model,
                    fingerprint(list(intent.template_files) + list(settings.training_files)), embed_s)


# --------------------------------------------------------------------------- command


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="profile YAML with routing.signals.intent.head")
    parser.add_argument("--output", help="write the artifact here instead of the profile's head.artifacts entry")
    parser.add_argument("--check", action="store_true",
                        help="only say whether the profile's artifact is up to date with the data files")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config.loader import ConfigError, load_config
    from .datafiles import resolve_data_path
    from .intent_head import load_head
    from .offline import local_embedder

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    head_settings = cfg.routing.signals.intent.head
    model = cfg.embedding_model.engine.model if cfg.embedding_model else None
    if head_settings is None or model is None:
        print(f"horizon train-router: {args.config} needs an embedding model and a "
              "routing.signals.intent.head section", file=sys.stderr)
        return 1
    artifact = head_settings.artifact_for(model)
    if artifact is None and not args.output:
        print(f"horizon train-router: routing.signals.intent.head.artifacts has no entry for the embedding "
              f"model {model!r}; add one (or pass --output)", file=sys.stderr)
        return 1
    if args.check:
        try:
            head = load_head(artifact or args.output, data_paths(cfg), model, config=args.config)
        except RoutingDataError as exc:
            print(f"horizon train-router: {exc}", file=sys.stderr)
            return 1
        print(f"{artifact or args.output}: up to date ({head.metadata.get('examples')} examples, "
              f"held-out accuracy {head.metadata.get('holdout_accuracy')})")
        return 0
    started = time.perf_counter()
    try:
        head, report = asyncio.run(train(cfg, local_embedder(cfg)))
    except (RoutingDataError, ValueError) as exc:
        print(f"horizon train-router: {exc}", file=sys.stderr)
        return 1
    if args.output:
        target = Path(args.output)
    else:
        try:
            target = resolve_data_path(artifact)
        except RoutingDataError:  # first build: relative to the project root
            from .datafiles import PROJECT_ROOT

            target = Path(artifact) if Path(artifact).is_absolute() else PROJECT_ROOT / artifact
    path = head.save(target)
    print(report.format())
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB) in {time.perf_counter() - started:.0f} s")
    return 0

