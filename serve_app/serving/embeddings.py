"""``/v1/embeddings``: normalised dense vectors from the profile's embedding model.

``dimensions`` (OpenAI's shortened embeddings) is honoured only at the model's own size. Cutting
a vector short is meaningful only for a model trained for it (Matryoshka), which neither BGE-M3
nor MiniLM is; a silently longer vector would break the caller's index later, far from the cause.
So any other size is a 400 naming ``dimensions`` and the size the model gives, before the model
runs once that size is known (it is learnt from the first answer).

A text longer than the model embeds (``embedding.max_length`` tokens) is a 400, as with OpenAI
and vLLM: a vector of a silently cut text would be wrong in the caller's index without a sign.
vLLM's ``truncate_prompt_tokens`` (-1: the model's limit; k: k tokens) and ``truncation_side``
ask for the cut instead.
"""

from __future__ import annotations

import base64
from typing import Any, Literal, Optional, Sequence

import numpy as np

from ..auth.keys import ApiKeyAuthenticator, Principal
from ..config.schema import HorizonConfig
from ..errors import InvalidRequest, ModelNotFound
from ..fleet.protocol import EmbeddingEndpointClient


class Embeddings:
    def __init__(self, cfg: HorizonConfig, embedder: Optional[EmbeddingEndpointClient], auth: ApiKeyAuthenticator):
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
                     dimensions: Optional[int] = None, truncate_prompt_tokens: Optional[int] = None,
                     truncation_side: Literal["left", "right"] = "right") -> dict[str, Any]:
        if self.model is None or self.embedder is None:
            raise ModelNotFound("this profile serves no embedding model", param="model")
        if model != self.model.alias:
            raise ModelNotFound(f"The embedding model {model!r} does not exist; use {self.model.alias!r}",
                                param="model")
        self.auth.authorize(principal, model=self.model.alias, decision=None, fusion=False)
        if any(not isinstance(t, str) or not t for t in texts):
            raise InvalidRequest("every input must be a non-empty string", param="input")
        self._check_dimensions(dimensions)
        limit = self.model.embedding.max_length if self.model.embedding else None
        if truncate_prompt_tokens is not None and limit is not None and truncate_prompt_tokens > limit:
            raise InvalidRequest(f"truncate_prompt_tokens={truncate_prompt_tokens} is more than model "
                                 f"{self.model.alias!r} embeds ({limit} tokens); use -1 for its limit",
                                 param="truncate_prompt_tokens")
        result = await self.embedder.embed_input(texts, truncate_prompt_tokens, truncation_side)
        vectors: Sequence[Any] = result.vectors  # float32 rows, written to JSON as they are
        if len(vectors):
            self._size = len(vectors[0])
        self._check_dimensions(dimensions)
        tokens = sum(result.prompt_tokens)  # the model's own tokenizer's count
        if encoding_format == "base64":
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        return {"object": "list", "model": self.model.alias,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
