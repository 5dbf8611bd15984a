"""The semantic router: computes the signals some decision references (concurrently), then
picks one decision. It knows nothing of Fusion or HTTP: it returns a :class:`RoutingResult`.

Lifecycle: construct (reads template and prompt files, so a broken data file fails the
deployment, not a request, and a stale trained intent head is refused here), ``await start()``
once (embeds the templates, or one probe text with a trained head), then ``route()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..fleet.protocol import EmbeddingClient, ModelClient
from ..config.routing import Decision
from ..config.schema import HorizonConfig
from ..errors import InvalidRequest
from .context import RequestContext, build_context
from .decisions import DecisionMatch, primary_model, select_decision
from .rules import index_matches, referenced_signal_types
from .sampling import apply_sampling_matrix
from .signals import BUILDERS, SignalDeps
from .signals.base import Signal, SignalMatch
from .signals.intent import ESCALATED_SOURCES, IntentSignal

__all__ = ["Router", "RoutingResult", "apply_sampling_matrix"]

log = logging.getLogger(__name__)


@dataclass
class RoutingResult:
    decision: Decision
    model: str
    task_type: str
    confidence: float
    signals: list[SignalMatch]
    routing_ms: float
    classifier_ms: Optional[float]
    escalated: bool
    # Conditions of the decision's rule tree that held ("type:name").
    matched_conditions: tuple[str, ...] = ()
    # True when no decision matched and routing.default_decision was used.
    fallback: bool = False
    # "decision:model" this result stands in for: the decision that matched names a model the
    # profile does not serve, and the default decision answers instead (ChatService.served).
    instead_of: Optional[str] = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def sampling_key(self) -> str:
        """Key for apply_sampling_matrix: the decision's sampling class, else the task type."""
        return self.decision.sampling_class or self.task_type

    def headers(self, debug: bool = False) -> dict[str, str]:
        out = {
            "x-vsr-selected-decision": self.decision.name,
            "x-vsr-selected-model": self.model,
            "x-vsr-task-type": self.task_type,
            "x-vsr-confidence": f"{self.confidence:.4f}",
            "x-vsr-routing-ms": f"{self.routing_ms:.2f}",
        }
        if debug:
            out["x-vsr-matched-signals"] = ",".join(
                f"{m.type}:{m.name}={m.confidence:.3f}" for m in self.signals)
            out["x-vsr-escalated"] = "true" if self.escalated else "false"
            if self.classifier_ms is not None:
                out["x-vsr-classifier-ms"] = f"{self.classifier_ms:.2f}"
        if self.instead_of is not None:
            out["x-vsr-instead-of"] = self.instead_of
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON view for ``POST /v1/route``, traces and ``horizon route``."""
        out = {
            "decision": self.decision.name,
            "model": self.model,
            "task_type": self.task_type,
            "confidence": round(self.confidence, 4),
            "escalated": self.escalated,
            "fallback": self.fallback,
            "algorithm": self.decision.algorithm.type,
            "refusal": self.decision.refusal is not None,
            "matched_conditions": list(self.matched_conditions),
            "signals": [{"type": m.type, "name": m.name, "confidence": round(m.confidence, 4),
                         "source": m.source} for m in self.signals],
            "routing_ms": round(self.routing_ms, 3),
            "classifier_ms": None if self.classifier_ms is None else round(self.classifier_ms, 3),
        }
        if self.instead_of is not None:
            out["instead_of"] = self.instead_of
        return out


class Router:
    def __init__(self, cfg: HorizonConfig, embedder: EmbeddingClient | None,
                 classifier: ModelClient | None):
        self._cfg = cfg
        routing = cfg.routing
        settings = routing.signals
        self._max_embed_chars = settings.intent.max_embed_chars
        deps = SignalDeps(cfg, embedder, classifier)
        # Only signals some decision references are built and computed.
        signals: dict[str, Signal] = {t: BUILDERS[t](deps) for t in sorted(referenced_signal_types(routing.decisions))}
        self._intent: Optional[IntentSignal] = signals.get("intent")  # type: ignore[assignment]
        self._signals = signals
        self._default = cfg.decision(routing.default_decision)

    @property
    def intent_signal(self) -> Optional[IntentSignal]:
        return self._intent

    async def start(self) -> None:
        if self._intent is not None:
            await self._intent.start()

    def referenced_signal_types(self) -> set[str]:
        return set(self._signals)

    async def _evaluate(self, signal: Signal, ctx: RequestContext) -> list[SignalMatch]:
        try:
            return await signal.evaluate(ctx)
        except InvalidRequest:
            raise
        except Exception:  # a signal bug must cost its matches, never the request
            log.exception("signal %s failed; treating it as no match", signal.type)
            return []

    async def route(self, request: dict, *, fusion_only: bool = False,
                    without_fusion: bool = False) -> RoutingResult | None:
        """The decision for ``request``: among Fusion decisions only (``fusion_only``, None when
        none matches), among the others only (``without_fusion``: a text completion, which
        Fusion does not answer), or among all."""
        started = time.perf_counter()
        ctx = build_context(request, max_embed_chars=self._max_embed_chars)
        results = await asyncio.gather(*(self._evaluate(s, ctx) for s in self._signals.values()))
        matches = [m for result in results for m in result]
        decisions = self._cfg.routing.decisions
        if fusion_only:
            decisions = [d for d in decisions if d.algorithm.type == "fusion"]
        elif without_fusion:
            decisions = [d for d in decisions if d.algorithm.type != "fusion"]
        chosen: Optional[DecisionMatch] = select_decision(decisions, index_matches(matches))
        fallback = chosen is None
        if chosen is None:
            if fusion_only:
                return None
            chosen = DecisionMatch(self._default, 0.0, ())
        intent = next((m for m in matches if m.type == "intent"), None)
        task_type = chosen.decision.task_type or (intent.name if intent else "unknown")
        escalated = intent is not None and intent.source in ESCALATED_SOURCES
        return RoutingResult(
            decision=chosen.decision,
            model=primary_model(chosen.decision),
            task_type=task_type,
            confidence=chosen.confidence,
            signals=matches,
            routing_ms=(time.perf_counter() - started) * 1000,
            classifier_ms=intent.latency_ms if intent is not None else None,
            escalated=escalated,
            matched_conditions=chosen.conditions,
            fallback=fallback,
            details={"intent": dict(intent.details)} if intent is not None and intent.details else {},
        )
