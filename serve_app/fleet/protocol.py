"""How the router, Fusion and resilience talk to models: one small protocol.

A request here is an OpenAI chat-completion body as a dict (without ``model``: the client
fills in the served name), or a text-completion body (``prompt``) for the ``*_text`` calls. A response is an OpenAI ``chat.completion`` dict; a stream yields
:class:`~serve_app.messages.chunks.Chunk` objects (an engine's JSON text, kept as it came). Failures are raised as :mod:`serve_app.errors` types
(``UpstreamError``, ``UpstreamTimeout``, ``ModelUnavailable``). Implementations over Ray Serve
deployment handles live in :mod:`serve_app.fleet.backends` (one module per kind); tests use one shared fake.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Protocol, runtime_checkable

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
        """L2-normalised dense vectors, one per text."""


class Fleet(Protocol):
    """Lookup of model clients by fleet alias."""

    def client(self, alias: str) -> ModelClient: ...

    @property
    def embedder(self) -> EmbeddingClient | None: ...
