"""How the router, Fusion and resilience talk to models: one small protocol.

A request here is an OpenAI chat-completion body as a dict (without ``model``: the client
fills in the served name), or a text-completion body (``prompt``) for the ``*_text`` calls. A response is an OpenAI ``chat.completion`` dict; a stream yields
:class:`~serve_app.messages.chunks.Chunk` objects (an engine's JSON text, kept as it came). Failures are raised as :mod:`serve_app.errors` types
(``UpstreamError``, ``UpstreamTimeout``, ``ModelUnavailable``). Implementations over Ray Serve
deployment handles live in :mod:`serve_app.fleet.backends` (one module per kind); tests use one shared fake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Protocol, Sequence, runtime_checkable

from ..errors import ContextLengthExceeded
from ..messages.chunks import Chunk

ChatRequest = dict[str, Any]
ChatResponse = dict[str, Any]
ChatChunk = Chunk


@runtime_checkable
class ModelClient(Protocol):
    alias: str

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Run one non-streaming chat completion."""

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Run one streaming chat completion, yielding chunk dicts (no SSE framing)."""

    async def complete_text(self, request: ChatRequest) -> ChatResponse:
        """Run one non-streaming text completion (``prompt`` instead of ``messages``; an
        OpenAI ``text_completion`` comes back)."""

    def stream_text(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Run one streaming text completion, yielding ``text_completion`` chunks."""


@runtime_checkable
class EmbeddingClient(Protocol):
    async def embed(self, texts: list[str]) -> list[list[float]]:
        """L2-normalised dense vectors, one per text (a text over the model's limit is cut:
        the router's calls)."""


@runtime_checkable
class EmbeddingEndpointClient(EmbeddingClient, Protocol):
    """What ``/v1/embeddings`` needs beyond the router's calls."""

    async def embed_input(self, texts: list[str], truncate_prompt_tokens: Optional[int] = None,
                          truncation_side: str = "right") -> "EmbeddingResult":
        """``/v1/embeddings``: vectors and the model's token counts. A text over the model's
        limit raises ``ContextLengthExceeded`` unless ``truncate_prompt_tokens`` (vLLM's: -1
        the limit, k tokens) asks for it to be cut from ``truncation_side``."""


@dataclass(frozen=True)
class EmbeddingResult:
    # One row per input: the deployment's float32 array, written to JSON as it is (float32's
    # shortest digits, as OpenAI answers), never turned into Python floats; a list of lists
    # where a client has no array.
    vectors: Sequence[Sequence[float]]
    prompt_tokens: list[int]


def too_long(alias: str, texts: int, index: int, tokens: int, limit: int) -> ContextLengthExceeded:
    """The 400 for an embedding input over the model's limit (vLLM's wording, with the index
    of the text when several were sent and the way out)."""
    which = "the input" if texts == 1 else f"input[{index}]"
    return ContextLengthExceeded(
        f"model {alias!r} embeds at most {limit} tokens per input, but {which} has {tokens}. "
        "Shorten it, or set truncate_prompt_tokens (-1: cut to the limit) to embed its first "
        "tokens only.", param="input",
        details={"model": alias, "max_input_tokens": limit, "index": index, "input_tokens": tokens})


class Fleet(Protocol):
    """Lookup of model clients by fleet alias."""

    def client(self, alias: str) -> ModelClient: ...

    @property
    def embedder(self) -> EmbeddingEndpointClient | None: ...
