"""The embedding deployment: FlagEmbedding behind Ray Serve with request batching.

``BGEM3FlagModel`` serves BGE-M3 on the fleet; ``FlagModel`` with mean pooling serves the
packaged all-MiniLM-L6-v2 on CPU profiles. Vectors are L2-normalised so callers can use dot
products as cosine similarity. Concurrent requests are merged by ``@serve.batch`` so routing
under load embeds many texts per forward pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Optional, Protocol

import numpy as np
from ray import serve

from serve_app.config.models import ModelSettings
from serve_app.observability.replica_logs import start_replica_logging

from .model_assets import resolve_model_path

log = logging.getLogger(__name__)


class Encoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...

    def fit(self, texts: list[str], truncate_prompt_tokens: Optional[int] = None,
            truncation_side: str = "right") -> "FittedInput": ...


@dataclass(frozen=True)
class FittedInput:
    """Texts measured (and cut, when asked) against the model's ``max_length``, in the model's
    own tokens, special tokens included. ``too_long``: the first text over the limit when no
    truncation was asked for (nothing is cut then; the caller answers 400)."""

    texts: list[str]
    tokens: list[int]
    limit: int
    too_long: Optional[int] = None


@dataclass(frozen=True)
class EmbeddedInput:
    """``/v1/embeddings``' answer from the deployment: one row per text and its token count, or
    nothing embedded and the index of a text over the limit."""

    vectors: Optional[np.ndarray]
    tokens: list[int]
    limit: int
    too_long: Optional[int] = None


class FlagEncoder:
    """FlagEmbedding model wrapper returning float32, L2-normalised rows."""

    def __init__(self, model: ModelSettings, device: str = "cpu"):
        settings = model.embedding
        assert settings is not None
        path = resolve_model_path(model.engine.model)
        self.max_length = settings.max_length
        self.max_tokens_per_pass = settings.max_tokens_per_pass
        self.dimension: int | None = None
        start = time.monotonic()
        # FlagEmbedding is imported only where a model is loaded: it pulls in torch and
        # transformers, which the ingress (a user of this module's client types) never needs.
        if settings.model_class == "bge-m3":
            from FlagEmbedding import BGEM3FlagModel

            self._model = BGEM3FlagModel(path, use_fp16=settings.use_fp16, devices=device)
            self._bge_m3 = True
        else:
            from FlagEmbedding import FlagModel

            self._model = FlagModel(path, pooling_method=settings.pooling_method,
                                    use_fp16=settings.use_fp16, devices=device,
                                    normalize_embeddings=True)
            self._model.model.to(device).eval()
            if settings.quantization == "dynamic_int8":
                self._model.model = _quantize_dynamic_int8(self._model.model)
            self._bge_m3 = False
        log.info("embedding model %s loaded from %s in %.1fs", model.alias, path,
                 time.monotonic() - start)

    def _encode_flag(self, texts: list[str]) -> np.ndarray:
        """FlagModel's tokenizer, encoder and pooling, one forward pass per length group.

        ``FlagModel.encode`` first runs a probe forward pass to find a batch size that fits
        device memory, then encodes: twice the work on every call, which dominates routing
        latency for the one-sentence requests the router sends. Batches here are bounded by
        ``max_batch_size`` already, so the probe buys nothing.

        Texts are sorted by token count and grouped so that a pass pads at most
        ``max_tokens_per_pass`` tokens: on CPU the cost of a pass is its padded token count,
        and routing batches mix 10-token chats with 300-token pastes.
        """
        import torch

        m = self._model
        ids = m.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        out: np.ndarray | None = None
        for group in length_groups([len(ids[i]) for i in order], self.max_tokens_per_pass):
            members = [order[i] for i in group]
            batch = m.tokenizer.pad({"input_ids": [ids[i] for i in members]}, return_tensors="pt")
            with torch.inference_mode():
                hidden = m.model(**batch, return_dict=True).last_hidden_state
                pooled = m.pooling(hidden, batch["attention_mask"]).float().numpy()
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[members] = pooled
        assert out is not None
        return out

    def fit(self, texts: list[str], truncate_prompt_tokens: Optional[int] = None,
            truncation_side: str = "right") -> FittedInput:
        """Each text's length in the model's tokens, against ``max_length`` (what one forward
        pass takes). ``truncate_prompt_tokens`` (vLLM's name): None, a longer text is refused
        (OpenAI and vLLM answer 400: an embedding of a silently cut text misleads a search
        index); -1, cut to ``max_length``; k, cut to k tokens. ``truncation_side``: ``right``
        keeps the start, ``left`` the end. The router's :meth:`encode` cuts silently instead:
        routing needs a view of a text, not all of it."""
        tokenizer = self._model.tokenizer
        ids = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        counts = [len(row) for row in ids]
        keep = None if truncate_prompt_tokens is None else \
            self.max_length if truncate_prompt_tokens == -1 else min(truncate_prompt_tokens, self.max_length)
        if keep is None:
            over = next((i for i, n in enumerate(counts) if n > self.max_length), None)
            return FittedInput(list(texts), counts, self.max_length, too_long=over)
        out, kept = list(texts), list(counts)
        for i, row in enumerate(ids):
            if len(row) <= keep:
                continue
            # The row without the model's special tokens ([CLS] and [SEP], or its own).
            mask = tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True)
            content = [token for token, is_special in zip(row, mask) if not is_special]
            special = len(row) - len(content)
            room = max(1, keep - special)
            part = content[:room] if truncation_side == "right" else content[-room:]
            out[i] = tokenizer.decode(part, skip_special_tokens=True)
            kept[i] = min(len(row), len(part) + special)
        return FittedInput(out, kept, self.max_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        if self._bge_m3:
            out = self._model.encode(texts, max_length=self.max_length)["dense_vecs"]
        else:
            out = self._encode_flag(texts)
        vecs = np.asarray(out, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.maximum(norms, 1e-12)
        self.dimension = vecs.shape[1]
        return vecs


def _quantize_dynamic_int8(module):
    """int8 Linear layers via ``torch.ao.quantization.quantize_dynamic`` (fbgemm on x86).

    PyTorch marks ``torch.ao.quantization`` deprecated in favour of torchao, but torchao's int8
    dynamic config runs eager on CPU ~20x slower than fp32 without ``torch.compile`` (MiniLM,
    one sentence: 220 ms vs 22 ms; this path 10-13 ms), so the fbgemm kernels stay until that
    changes. The deprecation warnings are silenced here only.
    """
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)


def length_groups(sorted_lengths: list[int], max_tokens_per_pass: int) -> list[list[int]]:
    """Cut positions of ascending ``sorted_lengths`` into consecutive groups whose padded size
    (members × longest) stays within ``max_tokens_per_pass`` (a longer text goes alone)."""
    groups: list[list[int]] = []
    for i, length in enumerate(sorted_lengths):
        if groups and (len(groups[-1]) + 1) * length <= max_tokens_per_pass:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def load_encoder(model: ModelSettings) -> FlagEncoder:
    return FlagEncoder(model)


class LocalEmbeddingClient:
    """EmbeddingClient over an in-process encoder (offline tools, unit tests): the router's
    calls, not ``/v1/embeddings``'."""

    def __init__(self, encoder: Encoder):
        self._encoder = encoder

    async def embed(self, texts: list[str]) -> list[list[float]]:
        vecs = await asyncio.to_thread(self._encoder.encode, list(texts))
        return vecs.tolist()


@serve.deployment(name="embedding")
class EmbeddingDeployment:
    """Ray Serve deployment of one embedding model; ``embed`` is batched across callers."""

    def __init__(self, model: dict[str, Any]):
        import torch

        start_replica_logging()
        self.settings = ModelSettings.model_validate(model)
        # Intra-op threads follow the CPUs the replica reserved: torch's default (all cores)
        # oversubscribes a machine whose other cores serve the ingress and the engines.
        torch.set_num_threads(max(1, round(self.settings.placement.num_cpus)))
        self.encoder = load_encoder(self.settings)
        emb = self.settings.embedding
        assert emb is not None
        # Batch limits come from the profile, so they are applied per replica at start-up.
        self._embed_batched.set_max_batch_size(emb.max_batch_size)
        self._embed_batched.set_batch_wait_timeout_s(emb.batch_wait_timeout_s)
        self._chunk_texts = emb.endpoint_chunk_texts
        # Forward-pass batches and texts since start: their ratio says whether batching works.
        self.batches = 0
        self.texts = 0
        self.encode_s = 0.0

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def _embed_batched(self, requests: list[list[str]]) -> list[np.ndarray]:
        # Each caller sent a list of texts; encode them all together (length-grouped passes).
        flat = [t for texts in requests for t in texts]
        self.batches += 1
        self.texts += len(flat)
        started = time.perf_counter()
        # Encoded inline, blocking this replica's event loop for one forward pass. A worker
        # thread would free the loop, but the forward holds the GIL between its many small
        # kernels, and the two threads' GIL contention cost more than it saved: MiniLM through
        # a handle on 2 cores ran 25/s (1 in flight) and 35/s (32 in flight) with to_thread,
        # 30/s and 55/s inline. Requests arriving meanwhile wait in the socket and join the
        # next batch.
        vecs = self.encoder.encode(flat)
        self.encode_s += time.perf_counter() - started
        out, i = [], 0
        for texts in requests:
            out.append(vecs[i:i + len(texts)])
            i += len(texts)
        return out

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Normalised float32 vectors, one row per text (longer texts cut at ``max_length``:
        the router's calls)."""
        return await self._embed_batched(list(texts))

    async def embed_input(self, texts: list[str], truncate_prompt_tokens: Optional[int] = None,
                          truncation_side: str = "right") -> EmbeddedInput:
        """``/v1/embeddings``: each text measured in the model's tokens first (see
        :meth:`FlagEncoder.fit`); nothing is embedded when one is over the limit."""
        fitted = self.encoder.fit(list(texts), truncate_prompt_tokens, truncation_side)
        if fitted.too_long is not None:
            return EmbeddedInput(None, fitted.tokens, fitted.limit, fitted.too_long)
        step = self._chunk_texts
        pieces = [await self._embed_batched(fitted.texts[i:i + step]) for i in range(0, len(fitted.texts), step)]
        return EmbeddedInput(np.concatenate(pieces), fitted.tokens, fitted.limit)

    async def info(self) -> dict[str, Any]:
        return {"alias": self.settings.alias, "dimension": self.encoder.dimension,
                "model": self.settings.engine.model, "batches": self.batches, "texts": self.texts,
                "encode_s": round(self.encode_s, 3)}

    async def check_health(self) -> None:
        # Serve calls this periodically; an encoder that cannot embed marks the replica unhealthy.
        self.encoder.encode(["health"])
