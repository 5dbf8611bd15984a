"""One fake fleet for every in-process test: scriptable model clients, an embedder, the fleet.

:class:`FakeModel` implements the ``ModelClient`` protocol (``complete`` / ``stream``). A test
scripts it with ``reply`` (what it answers by default) and ``replies`` (answers used first, in
order): each a text, a response dict, an exception to raise, or a callable of the request
returning one of those. ``mode`` is a shorthand for failures (``error``, ``down``, ``not_running``, ``hang``).
It records every request (``calls``), completions, cancellations, concurrency and closed
streams; its text-completion calls (``complete_text`` / ``stream_text``) answer the same script
in the ``text_completion`` shape. :class:`FakeEmbedder` is a bag-of-words ``EmbeddingClient``; :class:`FakeFleet` the
``Fleet``. Simulated engines on a real Ray cluster are the e2e tests' business, not this.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from typing import Any, AsyncIterator, Callable, Optional, Union

import numpy as np

from serve_app.errors import DeploymentNotRunning, EngineRequestFailed, ModelNotFound, ModelUnavailable, UpstreamError
from serve_app.messages.chunks import Chunk
from serve_app.fleet.protocol import EmbeddingResult, too_long

from .responses import completion, text_completion

Reply = Union[str, dict, BaseException, Callable[[dict], Any]]


def token_logprobs(tokens: list[str], top: int) -> list[dict]:
    """vLLM's chat ``logprobs.content`` for ``tokens``: each token with ``top`` alternatives."""
    def entry(token: str, rank: int) -> dict:
        return {"token": token, "logprob": -0.25 * rank, "bytes": list(token.encode())}
    return [{**entry(t, i), "top_logprobs": [entry(f"{t}~{k}", i + k) for k in range(top)]}
            for i, t in enumerate(tokens)]


def chunk(alias: str, content: Optional[str] = None, role: Optional[str] = None,
          finish: Optional[str] = None, logprobs: Optional[list[dict]] = None) -> Chunk:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return Chunk({"id": f"chunk-{alias}", "object": "chat.completion.chunk", "model": alias,
                  "choices": [choice]})


class FakeModel:
    def __init__(self, alias: str, reply: Reply = "hello", *, replies: Optional[list[Reply]] = None,
                 mode: str = "ok", delay_s: float = 0.0, delay: Optional[float] = None,
                 tokens: int = 3, token_delay_s: float = 0.0, fail_after_chunks: Optional[int] = None,
                 usage: tuple[int, int] = (10, 5)):
        self.alias = alias
        self.reply = reply
        self.replies = list(replies or [])
        self.mode = mode
        self.delay_s = delay if delay is not None else delay_s
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.fail_after_chunks = fail_after_chunks
        self.usage = usage
        self.calls: list[dict] = []
        self.completed = 0
        self.cancelled = 0
        self.closed_streams = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.fleet: Optional["FakeFleet"] = None

    @property
    def requests(self) -> list[dict]:
        return self.calls

    def _enter(self, request: dict) -> None:
        self.calls.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.fleet is not None:
            self.fleet.enter()

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.fleet is not None:
            self.fleet.leave()

    def _fail(self) -> None:
        if self.mode == "error":
            raise UpstreamError(f"{self.alias} exploded")
        if self.mode == "down":
            raise ModelUnavailable(f"{self.alias} replica is dead")
        if self.mode == "not_running":  # what the deployment board raises (Serve: no replica)
            raise DeploymentNotRunning(f"model {self.alias!r} is not running")
        if self.mode == "request_failed":  # a working engine's 500 for this one request
            raise EngineRequestFailed(f"model {self.alias!r} failed on this request: Internal server error")

    async def _wait(self) -> None:
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)

    def _answer(self, request: dict) -> dict:
        reply = self.replies.pop(0) if self.replies else self.reply
        if callable(reply) and not isinstance(reply, (type, BaseException)):
            reply = reply(request)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, dict):
            return reply
        answer = completion(reply, model=self.alias, prompt_tokens=self.usage[0],
                            completion_tokens=self.usage[1])
        if request.get("logprobs") and reply:   # as vLLM: one entry per token (a word here)
            answer["choices"][0]["logprobs"] = {
                "content": token_logprobs(reply.split(" "), int(request.get("top_logprobs") or 0))}
        return answer

    async def complete(self, request: dict) -> dict:
        self._enter(request)
        try:
            await self._wait()
            self._fail()
            answer = self._answer(request)
            self.completed += 1
            return answer
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self._leave()

    async def stream(self, request: dict) -> AsyncIterator[Chunk]:
        self._enter(request)
        try:
            yield chunk(self.alias, role="assistant")
            await self._wait()
            self._fail()
            for i in range(self.tokens):
                if self.fail_after_chunks is not None and i == self.fail_after_chunks:
                    raise UpstreamError(f"{self.alias} broke mid-stream")
                if i:
                    await asyncio.sleep(self.token_delay_s)
                yield chunk(self.alias, content=f"t{i} ", logprobs=token_logprobs(
                    [f"t{i} "], int(request.get("top_logprobs") or 0)) if request.get("logprobs") else None)
            yield chunk(self.alias, finish="stop")
            self.completed += 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.closed_streams += 1
            self._leave()


    # ------------------------------------------------------------------ text completions
    async def complete_text(self, request: dict) -> dict:
        """A text completion: the scripted reply's text (a dict reply is returned as is), one
        choice per prompt and ``n``."""
        answer = await self.complete(request)
        if answer.get("object") == "text_completion":
            return answer
        text = answer["choices"][0]["message"].get("content") or ""
        prompt = request.get("prompt")
        prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
        return text_completion(text, model=self.alias, choices=prompts * int(request.get("n") or 1),
                               prompt_tokens=self.usage[0], completion_tokens=self.usage[1])

    async def stream_text(self, request: dict) -> AsyncIterator[Chunk]:
        async for piece in self.stream(request):
            data = piece.data
            choices = [{"index": c.get("index", 0), "text": (c.get("delta") or {}).get("content") or "",
                        "logprobs": None, "finish_reason": c.get("finish_reason")}
                       for c in data.get("choices") or []]
            if choices and not any(c["text"] or c["finish_reason"] for c in choices):
                continue  # the role chunk has no counterpart in a text completion
            yield Chunk({**data, "object": "text_completion", "choices": choices})


class FakeEmbedder:
    """Bag-of-words vectors: one dimension per ``vocabulary`` word (plus a small constant, so a
    text with none of them is near-orthogonal to everything), or crc32 buckets of every word."""

    def __init__(self, vocabulary: Optional[list[str]] = None, *, dims: int = 256,
                 error: Optional[BaseException] = None, fail: bool = False):
        self.vocabulary = [w.lower() for w in vocabulary] if vocabulary else None
        self.dims = dims
        self.error = error or (RuntimeError("embedding deployment down") if fail else None)
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.error:
            raise self.error
        return [self._vector(text) for text in texts]

    # /v1/embeddings' limit in this fake's tokens (a word each, plus two special tokens).
    max_input_tokens = 512

    async def embed_input(self, texts: list[str], truncate_prompt_tokens: Optional[int] = None,
                          truncation_side: str = "right") -> EmbeddingResult:
        counts = [len(t.split()) + 2 for t in texts]
        if truncate_prompt_tokens is None:
            over = next((i for i, n in enumerate(counts) if n > self.max_input_tokens), None)
            if over is not None:
                raise too_long("bge-m3", len(texts), over, counts[over], self.max_input_tokens)
        else:
            keep = self.max_input_tokens if truncate_prompt_tokens == -1 else truncate_prompt_tokens
            words = [t.split() for t in texts]
            texts = [" ".join(w[:keep - 2] if truncation_side == "right" else w[-(keep - 2):])
                     if len(w) + 2 > keep else t for w, t in zip(words, texts)]
            counts = [min(n, keep) for n in counts]
        # float32 rows in one array, as the real client hands them over (fleet/backends/embedding.py).
        return EmbeddingResult(np.asarray(await self.embed(texts), dtype=np.float32), counts)

    def _vector(self, text: str) -> list[float]:
        words = re.findall(r"[a-z0-9]+" if self.vocabulary is None else r"[a-z]+", text.lower())
        if self.vocabulary is not None:
            vec = np.array([words.count(w) for w in self.vocabulary] + [0.05], dtype=np.float32)
        else:
            vec = np.zeros(self.dims, dtype=np.float32)
            for word in words:
                vec[zlib.crc32(word.encode()) % self.dims] += 1.0
        norm = float(np.linalg.norm(vec)) or 1.0
        return (vec / norm).tolist()

    @property
    def fail(self) -> bool:
        return self.error is not None

    @fail.setter
    def fail(self, value: bool) -> None:
        """Switch the embedder down (or back up) mid-test."""
        self.error = RuntimeError("embedding deployment down") if value else None

    @property
    def texts_embedded(self) -> int:
        return sum(len(c) for c in self.calls)


class FakeFleet:
    def __init__(self, *models: FakeModel, embedder: Optional[FakeEmbedder] = None):
        self.models = {m.alias: m for m in models}
        for m in models:
            m.fleet = self
        self._embedder = embedder
        self.in_flight = 0
        self.max_in_flight = 0

    def enter(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def client(self, alias: str) -> FakeModel:
        if alias not in self.models:
            raise ModelNotFound(f"model {alias!r} is not served")
        return self.models[alias]

    @property
    def embedder(self) -> Optional[FakeEmbedder]:
        return self._embedder

    def calls(self) -> dict[str, int]:
        return {alias: len(m.calls) for alias, m in self.models.items()}


class FakeHandle:
    """Stands in for a Ray Serve deployment handle under a backend's client: every method's
    ``.remote(body)`` records ``(method, body)`` in ``calls`` and returns ``answer(method, body)``
    (a coroutine, a generator: whatever the client awaits or iterates); ``options`` keeps it."""

    def __init__(self, answer: Callable[[str, dict], Any]):
        self.answer = answer
        self.calls: list[tuple[str, dict]] = []

    def options(self, **_: Any) -> "FakeHandle":
        return self

    def __getattr__(self, method: str) -> Any:
        handle = self

        class _Method:
            def remote(self, body: dict) -> Any:
                handle.calls.append((method, body))
                return handle.answer(method, body)

        return _Method()
