"""Resilience test helpers: a fake clock and a five-model profile; the model fakes are the shared
ones (tests/fakes)."""

from __future__ import annotations

from typing import Any, Optional

from fakes.fleet import FakeFleet, FakeModel, chunk  # noqa: F401  (the tests' one fake fleet)
from serve_app.config import parse_config


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


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
    return FakeFleet(*models.values())
