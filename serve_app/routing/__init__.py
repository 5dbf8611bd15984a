"""Semantic routing: signals (serve_app.routing.signals) -> decision (RoutingResult)."""

from .router import Router, RoutingResult, apply_sampling_matrix
from .signals.base import SignalMatch

__all__ = ["Router", "RoutingResult", "SignalMatch", "apply_sampling_matrix"]
