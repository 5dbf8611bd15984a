"""Resilience: breakers, bounded priority admission, deadlines, fallback chains, degradation.

Plain asyncio over the :mod:`serve_app.fleet.protocol` protocols; the ingress wires
:class:`ResilientFleet` over its Ray Serve handles. See docs/resilience.md.
"""

from .admission import AdmissionSlot, PriorityAdmission
from .breaker import (BreakerPolicy, BreakerState, BreakerStore, CircuitBreaker, LocalBreakerStore,
                      is_model_failure)
from .breaker_ray import BreakerRegistry, RayBreakerStore
from .degrade import Degrader
from .fallback import Hop, ResilientFleet, StreamRun, fallback_header
from .guarded import CircuitOpen, GuardedClient, GuardedModel
from .timeouts import Deadlines, complete_within, error_chunk, has_content, stream_within

__all__ = [
    "AdmissionSlot", "BreakerPolicy", "BreakerRegistry", "BreakerState", "BreakerStore",
    "CircuitBreaker", "CircuitOpen", "Deadlines", "Degrader", "GuardedClient", "GuardedModel",
    "Hop", "LocalBreakerStore", "PriorityAdmission", "RayBreakerStore", "ResilientFleet",
    "StreamRun", "complete_within", "error_chunk", "fallback_header", "has_content",
    "is_model_failure", "stream_within",
]
