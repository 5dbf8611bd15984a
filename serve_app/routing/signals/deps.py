"""What a signal's ``build`` may use: the profile, the model clients, and shared pieces."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from ...config.routing import SignalSettings
from ...config.schema import HorizonConfig
from ...fleet.protocol import EmbeddingClient, ModelClient
from .code import CodeFeatureDetector
from .short_text import ShortTextRule


@dataclass
class SignalDeps:
    cfg: HorizonConfig
    embedder: Optional[EmbeddingClient] = None
    classifier: Optional[ModelClient] = None

    @property
    def settings(self) -> SignalSettings:
        return self.cfg.routing.signals

    # Compiled once per router and shared: the code signal and the short-text rule (which the
    # intent signal applies too) read the same code features.
    @cached_property
    def code_detector(self) -> CodeFeatureDetector:
        return CodeFeatureDetector(self.settings.code)

    @cached_property
    def short_rule(self) -> ShortTextRule:
        return ShortTextRule(self.settings.short_text, self.code_detector)
