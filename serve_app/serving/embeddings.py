"""``/v1/embeddings``: normalised dense vectors from the profile's embedding model."""

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

    async def create(self, principal: Principal, model: str, texts: list[Any],
                     encoding_format: Literal["float", "base64"] = "float") -> dict[str, Any]:
        if self.model is None or self.embedder is None:
            raise ModelNotFound("this profile serves no embedding model", param="model")
        if model != self.model.alias:
            raise ModelNotFound(f"The embedding model {model!r} does not exist; use {self.model.alias!r}",
                                param="model")
        self.auth.authorize(principal, model=self.model.alias, decision=None, fusion=False)
        if any(not isinstance(t, str) or not t for t in texts):
            raise InvalidRequest("every input must be a non-empty string", param="input")
        vectors: list[Any] = await self.embedder.embed(texts)
        tokens = sum(estimate_text_tokens(t) for t in texts)
        if encoding_format == "base64":
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        return {"object": "list", "model": self.model.alias,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
