"""The trained intent head: a classifier on the frozen sentence embedding, and its artifact.

``horizon train-router`` (serve_app/routing/training.py) fits it on the intent templates plus
the training-only files and writes one ``.npz``; the intent signal loads it at start. Inference
is numpy only, well under a millisecond:

- two embeddings of the request (one embedding call): the whole text, and its **instruction
  view**, the text around a pasted paragraph or quote, else the first and last sentence
  (:func:`instruction_view`), so that the instruction around a pasted text is not drowned by
  the text's own content in the mean-pooled vector; short texts reuse the first vector;
- **neighbour features**: for each view and each intent, the mean cosine of the ``knn_k`` most
  similar training sentences of that intent, read from a memory of every training sentence
  (stored compactly: PCA to ``memory_dims`` dimensions, int8 per row);
- a multinomial **logistic regression** over [whole, view, neighbour features]; the picked
  intent is decided when its probability reaches that intent's calibrated bar, else escalated.

The artifact is versioned with its data: it records the fingerprint (sha256) of every template
and training file it was trained on and the embedding model whose vectors it read. Loading
refuses an artifact whose fingerprint or embedding model differs from the running profile's,
naming the command that rebuilds it; a silently stale head would route by sentences that no
longer exist.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from .datafiles import RoutingDataError, data_files, resolve_data_path

FORMAT_VERSION = 2  # 2: the instruction view drops quoted spans and long pasted lines

_SENTENCE_BREAK = re.compile(r"(?<=[.!?:])\s+|\n+")
# A quoted or fenced span long enough to be a pasted text rather than a phrase (instruction_view).
_QUOTED = re.compile(r'"[^"]{40,}"|“[^”]{40,}”|«[^»]{40,}»|```.*?```|(?<![\w])\'[^\']{40,}\'(?![\w])', re.S)


class StaleIntentHead(RoutingDataError):
    """The artifact does not match the templates, training files or embedding model in use."""


def fingerprint(paths: Iterable[str]) -> str:
    """sha256 over the names and bytes of the template and training files, in a stable order.

    Directory and file names, not full paths, so a checkout anywhere gives the same hash."""
    digest = hashlib.sha256()
    for file in sorted(data_files(paths), key=lambda f: (f.parent.name, f.name)):
        digest.update(f"{file.parent.name}/{file.name}\0".encode())
        digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def instruction_view(text: str, min_chars: int = 150, edge_chars: int = 160) -> str:
    """The instruction around a pasted text, for a text of ``min_chars`` or more, else the text.

    Requests that paste a text put the instruction before or after it, and the mean-pooled
    embedding of the whole mostly says what the pasted text is about ("simplify this for a kid:
    <article on vaccines>" embeds near questions about vaccines). So, in order:
    1. a quoted span of 40 characters or more ('…', "…", “…”, «…», a code fence) is the pasted
       text: the view is what is left, with "…" in its place;
    2. else, of several lines, the first and the last line when they are short (at most
       ``edge_chars``): a pasted paragraph is long, its instruction line is not;
    3. else the first and the last sentence, each cut to ``edge_chars``."""
    if len(text) < min_chars:
        return text
    outside = _QUOTED.sub(" … ", text)
    if outside != text and len(outside.replace("…", "").strip()) >= 10:
        return _edges(" ".join(outside.split()), edge_chars)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        short = [line for line in dict.fromkeys((lines[0], lines[-1])) if len(line) <= edge_chars]
        if short:
            return " … ".join(short)
    parts = [p.strip() for p in _SENTENCE_BREAK.split(text) if p and p.strip()]
    if len(parts) <= 1:
        return text[:edge_chars]
    return parts[0][:edge_chars] + " " + parts[-1][-edge_chars:]


def without_quoted(text: str) -> str:
    """The text less its quoted spans of 40 characters or more and code fences (what it
    pastes), when at least 10 characters are left: the words the user wrote."""
    outside = _QUOTED.sub(" ", text)
    return outside if len(outside.strip()) >= 10 else text


def _edges(text: str, edge_chars: int) -> str:
    """The text, or its first and last ``edge_chars`` characters when it is longer than twice that."""
    return text if len(text) <= 2 * edge_chars else text[:edge_chars] + " … " + text[-edge_chars:]


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


@dataclass
class NeighbourMemory:
    """Training sentences as PCA-projected, int8-quantised unit vectors with their intents."""

    mean: np.ndarray        # (dimension,)
    projection: np.ndarray  # (dimension, memory_dims)
    codes: np.ndarray       # (rows, memory_dims) int8
    scales: np.ndarray      # (rows,) float32
    labels: np.ndarray      # (rows,) intent index

    @classmethod
    def build(cls, vectors: np.ndarray, labels: np.ndarray, dims: int) -> "NeighbourMemory":
        mean = vectors.mean(axis=0).astype(np.float16).astype(np.float32)  # stored as float16
        _, _, vt = np.linalg.svd(vectors - mean, full_matrices=False)
        projection = vt[:min(dims, vt.shape[0])].T.astype(np.float16).astype(np.float32)
        projected = _normalise_rows((vectors - mean) @ projection)
        scales = np.maximum(np.abs(projected).max(axis=1), 1e-12) / 127.0
        codes = np.round(projected / scales[:, None]).astype(np.int8)
        return cls(mean.astype(np.float32), projection, codes, scales.astype(np.float32), labels.astype(np.int16))

    def project(self, vectors: np.ndarray) -> np.ndarray:
        return _normalise_rows((np.atleast_2d(vectors) - self.mean) @ self.projection)

    @property
    def rows(self) -> np.ndarray:
        """The dequantised memory (computed once)."""
        cached = self.__dict__.get("_rows")
        if cached is None or cached.shape[0] != self.codes.shape[0]:
            cached = self.__dict__["_rows"] = self.codes.astype(np.float32) * self.scales[:, None]
        return cached

    def features(self, vectors: np.ndarray, n_intents: int, k: int,
                 exclude: Optional[np.ndarray] = None) -> np.ndarray:
        """(n, n_intents): mean cosine of the k most similar memory rows of each intent.

        ``exclude`` (n, rows) masks rows per query (training: the query's own group)."""
        sims = self.project(vectors) @ self.rows.T
        if exclude is not None:
            sims = np.where(exclude, -1.0, sims)
        out = np.zeros((sims.shape[0], n_intents), dtype=np.float32)
        for c in range(n_intents):
            cols = sims[:, self.labels == c]
            if cols.shape[1] == 0:
                out[:, c] = -1.0
                continue
            kk = min(k, cols.shape[1])
            out[:, c] = np.partition(cols, -kk, axis=1)[:, -kk:].mean(axis=1)
        return out


@dataclass(frozen=True)
class HeadPrediction:
    """Probabilities of one text and the intent picked from them."""

    probabilities: dict[str, float]
    best: str

    @property
    def score(self) -> float:
        return self.probabilities[self.best]


@dataclass
class IntentHead:
    """Logistic regression over the two views' embeddings and their neighbour features."""

    intents: tuple[str, ...]
    weights: np.ndarray            # (features, intents)
    bias: np.ndarray               # (intents,)
    memory: NeighbourMemory
    thresholds: dict[str, float]   # calibrated probability bar per intent
    embedding_model: str
    data_fingerprint: str
    knn_k: int = 5
    knn_scale: float = 5.0
    view_min_chars: int = 150
    view_edge_chars: int = 160
    metadata: dict[str, Any] = field(default_factory=dict)

    def view(self, text: str) -> str:
        return instruction_view(text, self.view_min_chars, self.view_edge_chars)

    def features(self, whole: np.ndarray, view: np.ndarray, exclude: Optional[np.ndarray] = None) -> np.ndarray:
        n = len(self.intents)
        whole, view = np.atleast_2d(whole).astype(np.float32), np.atleast_2d(view).astype(np.float32)
        both = self.memory.features(np.vstack([whole, view]), n, self.knn_k,
                                    None if exclude is None else np.vstack([exclude, exclude]))
        return np.hstack([whole, view, self.knn_scale * both[:len(whole)], self.knn_scale * both[len(whole):]])

    def probabilities(self, whole: np.ndarray, view: np.ndarray) -> np.ndarray:
        return softmax(self.features(whole, view) @ self.weights + self.bias)

    def predict(self, whole: np.ndarray, view: Optional[np.ndarray] = None) -> HeadPrediction:
        probs = self.probabilities(whole, whole if view is None else view)[0]
        best = int(np.argmax(probs))
        return HeadPrediction({name: float(p) for name, p in zip(self.intents, probs)}, self.intents[best])

    def threshold(self, intent: str, overrides: Optional[dict[str, float]] = None) -> float:
        if overrides and intent in overrides:
            return overrides[intent]
        return self.thresholds.get(intent, 0.0)

    # ------------------------------------------------------------------ artifact

    def save(self, path: str | Path) -> Path:
        meta = {"format": FORMAT_VERSION, "intents": list(self.intents), "thresholds": self.thresholds,
                "embedding_model": self.embedding_model, "data_fingerprint": self.data_fingerprint,
                "knn_k": self.knn_k, "knn_scale": self.knn_scale, "view_min_chars": self.view_min_chars,
                "view_edge_chars": self.view_edge_chars, **self.metadata}
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        m = self.memory
        with open(out, "wb") as fh:
            np.savez_compressed(
                fh, weights=self.weights.astype(np.float32), bias=self.bias.astype(np.float32),
                memory_mean=m.mean.astype(np.float16), memory_projection=m.projection.astype(np.float16),
                memory_codes=m.codes, memory_scales=m.scales.astype(np.float32), memory_labels=m.labels,
                meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8))
        return out

    @classmethod
    def read(cls, path: str | Path) -> "IntentHead":
        """Read an artifact without checking it against the data (see :func:`load_head`)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
            meta = json.loads(bytes(arrays.pop("meta")).decode())
        except (OSError, KeyError, ValueError) as exc:
            raise RoutingDataError(f"intent head {path}: not a readable artifact ({exc})") from None
        if meta.get("format") != FORMAT_VERSION:
            raise StaleIntentHead(f"intent head {path}: format {meta.get('format')!r}, this version reads "
                                  f"{FORMAT_VERSION}; rebuild it with `horizon train-router`")
        try:
            intents = tuple(meta.pop("intents"))
            memory = NeighbourMemory(mean=arrays["memory_mean"].astype(np.float32),
                                     projection=arrays["memory_projection"].astype(np.float32),
                                     codes=arrays["memory_codes"], scales=arrays["memory_scales"],
                                     labels=arrays["memory_labels"])
            head = cls(intents=intents, weights=arrays["weights"], bias=arrays["bias"], memory=memory,
                       thresholds={k: float(v) for k, v in meta.pop("thresholds").items()},
                       embedding_model=meta.pop("embedding_model"), data_fingerprint=meta.pop("data_fingerprint"),
                       knn_k=int(meta.pop("knn_k")), knn_scale=float(meta.pop("knn_scale")),
                       view_min_chars=int(meta.pop("view_min_chars")),
                       view_edge_chars=int(meta.pop("view_edge_chars")),
                       metadata={k: v for k, v in meta.items() if k != "format"})
        except KeyError as exc:
            raise RoutingDataError(f"intent head {path}: missing {exc}") from None
        dim = head.memory.mean.shape[0]
        if head.weights.shape != (2 * dim + 2 * len(intents), len(intents)) or head.bias.shape != (len(intents),):
            raise RoutingDataError(f"intent head {path}: weights {head.weights.shape} do not fit "
                                   f"{len(intents)} intents and {dim}-dimensional embeddings")
        return head


def softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)


def load_head(path: str, data_paths: list[str], embedding_model: Optional[str], config: str = "<profile>") -> IntentHead:
    """The artifact at ``path``, checked against the current data files and embedding model.

    Raises :class:`StaleIntentHead` with the rebuild command when either differs."""
    try:
        resolved = resolve_data_path(path)
    except RoutingDataError:
        raise RoutingDataError(f"intent head {path} not found; build it: `horizon train-router --config {config}`") from None
    head = IntentHead.read(resolved)
    rebuild = f"rebuild it: `horizon train-router --config {config}`"
    current = fingerprint(data_paths)
    if head.data_fingerprint != current:
        raise StaleIntentHead(
            f"intent head {path} is stale: it was trained on template/training files with sha256 "
            f"{head.data_fingerprint[:12]}…, the files ({', '.join(data_paths)}) now hash to {current[:12]}…; {rebuild}")
    if embedding_model is not None and head.embedding_model != embedding_model:
        raise StaleIntentHead(
            f"intent head {path} was trained on {head.embedding_model!r} embeddings, the profile embeds with "
            f"{embedding_model!r}; {rebuild} or remove routing.signals.intent.head")
    return head
