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

from fakes.fleet import FakeEmbedder, FakeFleet, FakeModel  # noqa: F401  (the tests' one fake fleet)
from fakes.responses import completion, tool_call  # noqa: F401  (re-exported for the Fusion tests)
from serve_app.errors import ModelNotFound, UpstreamError

Reply = Union[str, dict, Exception, Callable[[dict], Any]]


ANALYSIS_JSON = json.dumps({"consensus": ["Paris"], "contradictions": [],
                            "partial_coverage": [], "unique_insights": [], "blind_spots": []})


def is_analysis_prompt(request: dict) -> bool:
    return "Return ONLY one compact JSON object" in prompt_of(request)


def prompt_of(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request.get("messages", []))


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
