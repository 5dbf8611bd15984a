"""In-process fakes for the resilience tests: a fake clock, scriptable models, a fleet."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Optional

from serve_app.config import parse_config
from serve_app.errors import ModelUnavailable, UpstreamError


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def completion(alias: str, text: str = "hello") -> dict[str, Any]:
    return {"id": f"cmpl-{alias}", "object": "chat.completion", "model": alias,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}]}


def chunk(alias: str, content: Optional[str] = None, role: Optional[str] = None,
          finish: Optional[str] = None) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"id": f"chunk-{alias}", "object": "chat.completion.chunk", "model": alias,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class FakeModel:
    """A ModelClient whose behaviour a test sets: ``mode`` is one of

    ok | error | down | hang | slow; ``delay_s`` delays the answer (and the first token);
    ``fail_after_chunks`` makes a stream break after that many content chunks.
    """

    def __init__(self, alias: str, mode: str = "ok", delay_s: float = 0.0,
                 tokens: int = 3, token_delay_s: float = 0.0, fail_after_chunks: Optional[int] = None):
        self.alias = alias
        self.mode = mode
        self.delay_s = delay_s
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.fail_after_chunks = fail_after_chunks
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed_streams = 0
        self.started: list[dict] = []

    def _fail(self) -> None:
        if self.mode == "error":
            raise UpstreamError(f"{self.alias} exploded")
        if self.mode == "down":
            raise ModelUnavailable(f"{self.alias} replica is dead")

    async def complete(self, request: dict) -> dict:
        self.calls += 1
        self.started.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.mode == "hang":
                await asyncio.sleep(3600)
            await asyncio.sleep(self.delay_s)
            self._fail()
            return completion(self.alias)
        finally:
            self.in_flight -= 1

    async def stream(self, request: dict) -> AsyncIterator[dict]:
        self.calls += 1
        self.started.append(request)
        try:
            yield chunk(self.alias, role="assistant")
            if self.mode == "hang":
                await asyncio.sleep(3600)
            await asyncio.sleep(self.delay_s)
            self._fail()
            for i in range(self.tokens):
                if self.fail_after_chunks is not None and i == self.fail_after_chunks:
                    raise UpstreamError(f"{self.alias} broke mid-stream")
                if i:
                    await asyncio.sleep(self.token_delay_s)
                yield chunk(self.alias, content=f"t{i} ")
            yield chunk(self.alias, finish="stop")
        finally:
            self.closed_streams += 1


class FakeFleet:
    def __init__(self, models: dict[str, FakeModel]):
        self.models = models

    def client(self, alias: str) -> FakeModel:
        return self.models[alias]

    @property
    def embedder(self):
        return None

    def calls(self) -> dict[str, int]:
        return {alias: m.calls for alias, m in self.models.items()}


ALIASES = ("k2", "qwen-72b", "r1-distill", "coder", "minicpm-v")
_ROLES = {"k2": "coordinator", "qwen-72b": "chat", "r1-distill": "reasoning", "coder": "code",
          "minicpm-v": "vision"}

VISION_MESSAGE = "Please send a clearer image."


def make_config(resilience: Optional[dict] = None, timeouts: Optional[dict] = None,
                extra_models: Optional[list[dict]] = None, **top: Any):
    """A five-model profile with the SPEC §6 resilience section, overridable per test."""
    models = [{"alias": a, "role": _ROLES[a], "backend": "simulated",
               "engine": {"model": f"fake/{a}"},
               "timeouts": (timeouts or {}).get(a, {"first_token_s": 60, "total_s": 60}),
               "scaling": {"max_ongoing_requests": 4}}
              for a in ALIASES]
    models += extra_models or []
    res = {
        "max_fallback_depth": 1,
        "fallback_chains": {"reasoning": ["r1-distill", "k2", "qwen-72b"], "code": ["coder", "k2"],
                            "chat": ["qwen-72b", "k2"], "unknown": ["k2", "qwen-72b"]},
        "no_fallback_messages": {"vision": VISION_MESSAGE},
        "priorities": {"vision": 0, "chat": 0, "summary": 1, "code": 2, "reasoning": 3, "unknown": 3},
    }
    res.update(resilience or {})
    doc = {"profile": "test", "models": models,
           "routing": {"default_decision": "d", "decisions": [{"name": "d", "modelRefs": [{"model": "qwen-72b"}]}]},
           "resilience": res}
    doc.update(top)
    return parse_config(doc)


def make_fleet(*overrides: FakeModel) -> FakeFleet:
    models = {a: FakeModel(a) for a in ALIASES}
    for model in overrides:
        models[model.alias] = model
    return FakeFleet(models)
