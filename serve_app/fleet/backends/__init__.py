"""One module per kind of model deployment; :func:`backend` is the only lookup by kind.

Adding a backend: a module here with a :class:`~.base.Backend` subclass instance named
``BACKEND``, its name in ``serve_app.config.base.Backend`` (the vocabulary profiles are
validated against), and its line in ``_REGISTRY`` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Backend
from .embedding import BACKEND as _EMBEDDING
from .simulated import BACKEND as _SIMULATED
from .vllm import BACKEND as _VLLM

if TYPE_CHECKING:
    from serve_app.config.schema import HorizonConfig

_REGISTRY: dict[str, Backend] = {b.kind: b for b in (_VLLM, _EMBEDDING, _SIMULATED)}


def backend(kind: str) -> Backend:
    return _REGISTRY[kind]


def registered() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def engine_problems(cfg: "HorizonConfig") -> list[tuple[str, str]]:
    """(key, problem) for each engine setting of the profile's models that their deployments
    would refuse at start, minutes in (vLLM's unknown tool-call parser); the commands that load
    a profile and the app builder refuse it up front, naming the key."""
    return [(f"models[{i}].{key}", problem) for i, model in enumerate(cfg.models)
            for key, problem in backend(model.backend).engine_problems(model)]


__all__ = ["Backend", "backend", "engine_problems", "registered"]
