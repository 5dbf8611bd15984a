"""Fusion: a panel of models answers, a judge analyses agreement, one synthesis call replies.

Public interface (the ingress integrates these):

- :func:`policy.find_fusion_plugin`, :func:`policy.resolve_policy`,
  :func:`policy.no_eligible_decision_error` -> :class:`policy.FusionPolicy`
- :class:`looper.FusionLooper` ``.run(request, policy)`` -> :class:`looper.FusionOutcome`
"""

from .errors import FusionPanelError
from .looper import FusionLooper, FusionOutcome
from .policy import (DIRECT_DECISION_NAME, FusionPolicy, find_fusion_plugin,
                     no_eligible_decision_error, resolve_policy)
from .templates import PromptTemplates

__all__ = [
    "DIRECT_DECISION_NAME", "FusionLooper", "FusionOutcome", "FusionPanelError", "FusionPolicy",
    "PromptTemplates", "find_fusion_plugin", "no_eligible_decision_error", "resolve_policy",
]
