"""``/v1/embeddings``: normalised dense vectors from the profile's embedding model.

``dimensions`` (OpenAI's shortened embeddings) is honoured only at the model's own size. Cutting
a vector short is meaningful only for a model trained for it (Matryoshka), which neither BGE-M3
nor MiniLM is; a silently longer vector would break the caller's index later, far from the cause.
So any other size is a 400 naming ``dimensions`` and the size the model gives, before the model
runs once that size is known (it is learnt from the first answer).
"""

from __future__ import annotations

import base64
from typing import Any, Literal, Optional

import numpy as np

from ..auth.keys import ApiKeyAuthenticator, Principal
from ..config.schema import HorizonConfig
from ..errors import InvalidRequest, ModelNotFound
from ..fleet.protocol import EmbeddingClient
from ..messages.view import estimate_text_tokens


class Embeddings:
    def __init__(self, cfg: HorizonConfig, embedder: Optional[EmbeddingClient], auth: ApiKeyAuthenticator):
        self.model = cfg.embedding_model
        self.embedder = embedder
        self.auth = auth
        self._size: Optional[int] = None  # the model's vector size, from its first answer

    def _check_dimensions(self, dimensions: Optional[int]) -> None:
        if dimensions is not None and self._size is not None and dimensions != self._size:
            assert self.model is not None
            raise InvalidRequest(
                f"model {self.model.alias!r} returns {self._size}-dimensional embeddings and cannot "
                f"shorten them; omit 'dimensions' or set it to {self._size}", param="dimensions")

    async def create(self, principal: Principal, model: str, texts: list[Any],
                     encoding_format: Literal["float", "base64"] = "float",
                     dimensions: Optional[int] = None) -> dict[str, Any]:
        if self.model is None or self.embedder is None:
            raise ModelNotFound("this profile serves no embedding model", param="model")
        if model != self.model.alias:
            raise ModelNotFound(f"The embedding model {model!r} does not exist; use {self.model.alias!r}",
                                param="model")
        self.auth.authorize(principal, model=self.model.alias, decision=None, fusion=False)
        if any(not isinstance(t, str) or not t for t in texts):
            raise InvalidRequest("every input must be a non-empty string", param="input")
        self._check_dimensions(dimensions)
        vectors: list[Any] = await self.embedder.embed(texts)
        if vectors:
            self._size = len(vectors[0])
        self._check_dimensions(dimensions)
        tokens = sum(estimate_text_tokens(t) for t in texts)
        if encoding_format == "base64":
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        return {"object": "list", "model": self.model.alias,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
