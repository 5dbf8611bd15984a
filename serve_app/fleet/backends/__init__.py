"""One module per kind of model deployment; :func:`backend` is the only lookup by kind.

Adding a backend: a module here with a :class:`~.base.Backend` subclass instance named
``BACKEND``, its name in ``serve_app.config.base.Backend`` (the vocabulary profiles are
validated against), and its line in ``_REGISTRY`` below.
"""

from __future__ import annotations

from .base import Backend
from .embedding import BACKEND as _EMBEDDING
from .simulated import BACKEND as _SIMULATED
from .vllm import BACKEND as _VLLM

_REGISTRY: dict[str, Backend] = {b.kind: b for b in (_VLLM, _EMBEDDING, _SIMULATED)}


def backend(kind: str) -> Backend:
    return _REGISTRY[kind]


def registered() -> tuple[str, ...]:
    return tuple(_REGISTRY)


__all__ = ["Backend", "backend", "registered"]
