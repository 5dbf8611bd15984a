"""One module per signal type (settings in ``serve_app.config.routing``); each implements
``signals.base.Signal`` and has ``build(deps)``. :data:`BUILDERS` is the registration."""

from __future__ import annotations

from typing import Callable

from . import code, context_length, intent, keyword, language, modality, short_text
from .base import Signal
from .deps import SignalDeps

BUILDERS: dict[str, Callable[[SignalDeps], Signal]] = {
    "intent": intent.build,
    "keyword": keyword.build,
    "code": code.build,
    "modality": modality.build,
    "short_text": short_text.build,
    "context_length": context_length.build,
    "language": language.build,
}

__all__ = ["BUILDERS", "Signal", "SignalDeps"]
