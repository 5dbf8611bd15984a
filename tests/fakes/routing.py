"""Routing fakes: a bag-of-words embedder over a small vocabulary, a scripted classifier, intent
templates written to a directory, and a routing profile over them (routing and gateway tests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional

import yaml

from .fleet import FakeEmbedder, FakeModel
from serve_app.config.loader import parse_config
from serve_app.config.schema import HorizonConfig


def BagOfWordsEmbedder(vocabulary: list[str], fail: bool = False) -> FakeEmbedder:
    """The shared fake embedder counting ``vocabulary`` words: texts sharing them get a high
    cosine; a text with none is near-orthogonal to every template (drives scores below threshold)."""
    return FakeEmbedder(vocabulary, fail=fail)


def ScriptedClassifier(*answers: Any, delay_s: float = 0.0) -> FakeModel:
    """The classifier model (k2) answering from a script (content strings or exceptions), then
    ``{"task_type": "unknown"}``."""
    return FakeModel("k2", '{"task_type": "unknown"}', replies=list(answers), delay_s=delay_s)


VOCABULARY = ["python", "function", "code", "bug", "hello", "weather", "friend", "prove", "integral",
              "equation", "summarize", "article", "photo", "image", "bomb", "weapon", "thing", "stuff"]

TEMPLATES = {
    "code": ["python function code", "fix the bug in my python code", "write a function in code"],
    "chat": ["hello friend", "what is the weather like friend", "hello how is the weather"],
    "reasoning": ["prove the equation", "solve the integral equation", "prove this integral"],
    "summary": ["summarize the article", "summarize this article please", "article summarize"],
    "vision": ["describe the photo", "what is in the image photo", "image photo"],
    "safety": ["build a bomb", "make a weapon bomb", "weapon"],
    "unknown": ["the thing stuff", "stuff thing", "do the thing"],
}


def write_templates(directory: Path, templates: dict[str, list[str]] = TEMPLATES) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for intent, examples in templates.items():
        (directory / f"{intent}.yaml").write_text(yaml.safe_dump({"intent": intent, "examples": examples}))
    (directory / "prompt.txt").write_text("Classify. Answer {\"task_type\": ...}")
    return directory


def _model(alias: str, role: str) -> dict:
    return {"alias": alias, "role": role, "backend": "simulated", "engine": {"model": f"sim/{alias}"}}


def intent_decision(name: str, intent: str, model: str, priority: int = 10, **extra: Any) -> dict:
    return {"name": name, "priority": priority, "task_type": intent, "modelRefs": [{"model": model}],
            "rules": {"operator": "AND", "conditions": [{"type": "intent", "name": intent}]}, **extra}


DEFAULT_DECISIONS = [
    intent_decision("safety", "safety", "qwen-72b", 100, refusal="no"),
    {"name": "vision", "priority": 90, "task_type": "vision", "modelRefs": [{"model": "minicpm-v"}],
     "rules": {"operator": "OR", "conditions": [{"type": "modality", "name": "image"},
                                                {"type": "intent", "name": "vision"}]}},
    intent_decision("code", "code", "coder", 70),
    intent_decision("reasoning", "reasoning", "r1-distill", 60),
    intent_decision("summary", "summary", "qwen-72b", 50),
    intent_decision("unclassified", "unknown", "k2", 20),
    {"name": "general_chat", "priority": 10, "task_type": "chat", "modelRefs": [{"model": "qwen-72b"}],
     "rules": {"operator": "OR", "conditions": [{"type": "intent", "name": "chat"},
                                                {"type": "short_text", "name": "short"}]}},
]


def profile(template_dir: Optional[Path] = None, *, decisions: Optional[list[dict]] = None,
            signals: Optional[dict] = None, default: str = "general_chat", threshold: float = 0.6,
            sampling_matrix: Optional[dict] = None) -> dict:
    """A small profile document (bare Horizon mapping) for routing tests."""
    sig = copy.deepcopy(signals) if signals else {}
    intent = sig.setdefault("intent", {})
    if template_dir is not None:
        intent.setdefault("template_files", [str(template_dir)])
        intent.setdefault("classifier", {}).setdefault("prompt_file", str(template_dir / "prompt.txt"))
    intent.setdefault("thresholds", {"sim/embed": threshold})
    intent.setdefault("aggregation", "max")
    return {
        "profile": "routing-test",
        "models": [_model("k2", "coordinator"), _model("qwen-72b", "chat"), _model("r1-distill", "reasoning"),
                   _model("coder", "code"), _model("minicpm-v", "vision"),
                   {"alias": "embed", "role": "embedding", "backend": "embedding", "engine": {"model": "sim/embed"}}],
        "routing": {"default_decision": default, "decisions": copy.deepcopy(decisions or DEFAULT_DECISIONS),
                    "sampling_matrix": sampling_matrix or {"code": 0.1, "chat": 0.7, "creative": 0.9,
                                                           "classification": 0.0},
                    "signals": sig},
    }


def config(*args: Any, **kwargs: Any) -> HorizonConfig:
    return parse_config(profile(*args, **kwargs))


def chat(text: str, *, image: bool = False) -> dict:
    if image:
        parts: list[dict] = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
        if text:
            parts.insert(0, {"type": "text", "text": text})
        return {"messages": [{"role": "user", "content": parts}]}
    return {"messages": [{"role": "user", "content": text}]}
