"""In-process fakes of the Fleet / ModelClient / EmbeddingClient protocols for Fusion tests.

A FakeModel answers from a script (text, a callable, or a queue of replies), can be slow, fail,
hang, answer empty or return tool calls, and records every request and every cancellation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import zlib
from typing import Any, Callable, Optional, Union

from serve_app.config.loader import parse_config

from fakes.responses import completion, tool_call  # noqa: F401  (re-exported for the Fusion tests)
from serve_app.errors import ModelNotFound, UpstreamError

Reply = Union[str, dict, Exception, Callable[[dict], Any]]


ANALYSIS_JSON = json.dumps({"consensus": ["Paris"], "contradictions": [],
                            "partial_coverage": [], "unique_insights": [], "blind_spots": []})


def is_analysis_prompt(request: dict) -> bool:
    return "Return ONLY one compact JSON object" in prompt_of(request)


def prompt_of(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request.get("messages", []))


class FakeModel:
    def __init__(self, alias: str, reply: Reply = "an answer", *, delay: float = 0.0,
                 replies: Optional[list[Reply]] = None, usage: tuple[int, int] = (10, 5)):
        self.alias = alias
        self.reply = reply
        self.replies = list(replies or [])
        self.delay = delay
        self.usage = usage
        self.calls: list[dict] = []
        self.cancelled = 0
        self.completed = 0
        self.fleet: Optional["FakeFleet"] = None

    async def complete(self, request: dict) -> dict:
        self.calls.append(request)
        if self.fleet:
            self.fleet.enter()
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            reply = self.replies.pop(0) if self.replies else self.reply
            if callable(reply) and not isinstance(reply, type):
                reply = reply(request)
            if isinstance(reply, Exception):
                raise reply
            self.completed += 1
            if isinstance(reply, dict):
                return reply
            return completion(reply, model=self.alias, prompt_tokens=self.usage[0],
                              completion_tokens=self.usage[1])
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            if self.fleet:
                self.fleet.leave()

    async def stream(self, request: dict):  # pragma: no cover - Fusion never streams sub-calls
        raise AssertionError("Fusion must not stream sub-calls")
        yield {}


class FakeEmbedder:
    """Bag-of-words vectors (crc32 buckets): texts sharing words point the same way."""

    def __init__(self, dims: int = 256, error: Optional[Exception] = None):
        self.dims = dims
        self.error = error
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.error:
            raise self.error
        out = []
        for text in texts:
            vec = [0.0] * self.dims
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                vec[zlib.crc32(word.encode()) % self.dims] += 1.0
            norm = sum(v * v for v in vec) ** 0.5 or 1.0
            out.append([v / norm for v in vec])
        return out


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


def judge_reply(analysis: Reply = ANALYSIS_JSON, final: Reply = "the fused answer") -> Callable[[dict], Any]:
    """A judge that answers analysis prompts with ``analysis`` and anything else with ``final``."""
    def respond(request: dict) -> Any:
        chosen = analysis if is_analysis_prompt(request) else final
        return chosen(request) if callable(chosen) and not isinstance(chosen, Exception) else chosen
    return respond


def standard_fleet(**overrides: FakeModel) -> FakeFleet:
    models = {
        "k2": FakeModel("k2", judge_reply()),
        "qwen-72b": FakeModel("qwen-72b", "The capital of France is Paris."),
        "r1-distill": FakeModel("r1-distill", "Paris is the capital of France."),
        "coder": FakeModel("coder", "France's capital city is Paris."),
    }
    models.update(overrides)
    return FakeFleet(*models.values(), embedder=FakeEmbedder())


def config_doc(*decisions: dict, embedding: bool = True, **extra: Any) -> dict:
    models = [{"alias": a, "role": r, "backend": "simulated", "engine": {"model": a}}
              for a, r in [("k2", "coordinator"), ("qwen-72b", "chat"),
                           ("r1-distill", "reasoning"), ("coder", "code")]]
    if embedding:
        models.append({"alias": "bge-m3", "role": "embedding", "backend": "embedding",
                       "engine": {"model": "packaged:minilm"}})
    doc = {
        "profile": "fusion-test",
        "models": models,
        "routing": {"default_decision": "general_chat", "decisions": [
            {"name": "general_chat", "modelRefs": [{"model": "qwen-72b"}]}, *decisions]},
    }
    doc.update(extra)
    return doc


def fusion_decision(name: str = "panel", **fusion: Any) -> dict:
    return {"name": name, "modelRefs": [{"model": "qwen-72b"}, {"model": "r1-distill"},
                                        {"model": "coder"}],
            "algorithm": {"type": "fusion", "fusion": {"model": "k2", **fusion}}}


def make_config(*decisions: dict, **kw: Any):
    return parse_config(config_doc(*decisions, **kw))


def run(coro):
    return asyncio.run(coro)


def failing(message: str = "engine exploded") -> UpstreamError:
    return UpstreamError(message)
