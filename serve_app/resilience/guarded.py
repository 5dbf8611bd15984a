"""One model behind its breaker, admission queue and deadlines; no fallback.

:class:`GuardedModel` is the single way a call reaches a model: the fallback chain calls it
once per hop, and :class:`GuardedClient` exposes it as a plain
:class:`~serve_app.fleet.protocol.ModelClient` for callers that must not fall back (Fusion panel
members: a panel answer silently coming from another model would corrupt the comparison).

Order of the gates: a cheap breaker check first (an open breaker must not make a request
queue), then the admission line, then the breaker again with a reservation (it may have
opened while the request waited, and half-open trial slots are counted), then the call.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Optional

from ..fleet.protocol import ChatChunk, ChatRequest, ChatResponse, ModelClient
from ..config.models import SamplingDefaults
from ..observability.metrics import record_model_call, set_breaker_state, set_queue_depth
from ..errors import DeploymentNotRunning, EngineRequestFailed, ModelUnavailable, UpstreamError
from .admission import AdmissionSlot, PriorityAdmission
from .breaker import BreakerPermit, CircuitBreaker, is_model_failure
from .stats import ModelStats
from .timeouts import Deadlines, complete_within, error_chunk, stream_within

# Ray's metrics agent forgets a gauge value not recorded again within two export intervals: the
# gateway re-records every model's gauges this often (Gateway.start), and a call re-records them
# once this long has passed since they were last recorded.
GAUGE_REFRESH_S = 5.0


class CircuitOpen(ModelUnavailable):
    """The model's breaker is open (or its half-open trial slots are taken): not called."""

    code = "circuit_open"


def with_model_defaults(request: ChatRequest, defaults: Optional[SamplingDefaults]) -> ChatRequest:
    """``request`` with the model's configured sampling defaults where it sets none.

    Applied to every call of the model (direct, fallback hop, Fusion panel and judge,
    classifier), so a hop to another model uses that model's defaults, not the first one's.
    """
    if defaults is None:
        return request
    out = request
    for key in ("temperature", "top_p"):
        value = getattr(defaults, key)
        if value is not None and out.get(key) is None:
            out = {**out, key: value}
    if defaults.max_tokens is not None and out.get("max_tokens") is None \
            and out.get("max_completion_tokens") is None:
        out = {**out, "max_tokens": defaults.max_tokens}
    return out


class TextCompletions:
    """A model client's text-completion calls (``/v1/completions``) under the names of its chat
    calls, so one set of gates (breaker, admission line, deadlines) serves both."""

    def __init__(self, client: ModelClient):
        self.alias = client.alias
        self._client = client

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return await self._client.complete_text(request)

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        return self._client.stream_text(request)


class GuardedModel:
    def __init__(self, alias: str, client: ModelClient, breaker: CircuitBreaker,
                 admission: PriorityAdmission, deadlines: Deadlines, stats: ModelStats,
                 defaults: Optional[SamplingDefaults] = None):
        self.alias = alias
        self.client = client
        self.breaker = breaker
        self.admission = admission
        self.deadlines = deadlines
        self.stats = stats
        self.defaults = defaults
        self._published: tuple[Optional[str], Optional[int]] = (None, None)
        self._published_at = float("-inf")

    # ------------------------------------------------------------------ gates
    def _circuit_open(self) -> CircuitOpen:
        retry = self.breaker.retry_after_s()
        state = self.breaker.state().state
        why = ("its circuit breaker is open after repeated failures" if state == "open"
               else "it is recovering and its trial capacity is in use")
        return CircuitOpen(f"model {self.alias} is unavailable: {why}",
                           retry_after=max(retry, self.admission.retry_after.min_s),
                           details={"model": self.alias, "breaker": state})

    async def _admit(self, priority: int) -> tuple[AdmissionSlot, BreakerPermit]:
        if not self.breaker.allows():
            raise self._circuit_open()
        slot = await self.admission.acquire(priority)
        permit = self.breaker.try_acquire()
        if permit is None:
            slot.release()
            raise self._circuit_open()
        return slot, permit

    def _settle(self, permit: BreakerPermit, exc: Optional[BaseException], started: float) -> None:
        elapsed = time.perf_counter() - started
        if exc is None:
            permit.success()
            self.stats.record(True, elapsed)
            record_model_call(self.alias, "ok", elapsed)
        elif isinstance(exc, EngineRequestFailed):
            # This request failed inside a working engine: a failed call, not a failing model.
            permit.release()
            self.stats.record(False, elapsed)
            record_model_call(self.alias, exc.status, elapsed)
        elif not isinstance(exc, (asyncio.CancelledError, DeploymentNotRunning)) and is_model_failure(exc):
            permit.failure()
            self.stats.record(False, elapsed)
            record_model_call(self.alias, getattr(exc, "status", 502), elapsed)
        else:
            # Cancelled, or not the model's fault (a client error, back-pressure, a deployment
            # Serve reports down, so nothing was called): the permit goes back uncounted.
            permit.release()
        self.publish_gauges()

    def publish_gauges(self, force: bool = False) -> None:
        """Breaker state and admission queue depth as Prometheus gauges, when they change and
        again every ``GAUGE_REFRESH_S`` (a Ray metric record costs tens of microseconds: not for
        every call; and Ray's exporter drops a gauge value that was not recorded again since its
        last export, so an unchanged value must still be re-recorded now and then)."""
        state, depth = self.breaker.state().state, self.admission.queue_length
        now = time.monotonic()
        stale = force or now - self._published_at >= GAUGE_REFRESH_S
        if stale or state != self._published[0]:
            set_breaker_state(self.alias, state)
        if stale or depth != self._published[1]:
            set_queue_depth(self.alias, depth)
        self._published = (state, depth)
        if stale:
            self._published_at = now

    # ------------------------------------------------------------------ calls
    def _client_for(self, text: bool) -> ModelClient:
        return TextCompletions(self.client) if text else self.client  # type: ignore[return-value]

    async def complete(self, request: ChatRequest, priority: int, *, text: bool = False) -> ChatResponse:
        """One completion (``text``: a text completion) through the gates."""
        request = with_model_defaults(request, self.defaults)
        slot, permit = await self._admit(priority)
        started = time.perf_counter()
        try:
            response = await complete_within(self._client_for(text), request, self.deadlines)
        except BaseException as exc:
            self._settle(permit, exc, started)
            raise
        finally:
            slot.release()
        self._settle(permit, None, started)
        return response

    async def open_stream(self, request: ChatRequest, priority: int, *, text: bool = False) -> "LiveStream":
        """Start a stream and wait for its first content; raises if none comes (fallback is
        still possible then: nothing has been sent)."""
        request = with_model_defaults(request, self.defaults)
        slot, permit = await self._admit(priority)
        started = time.perf_counter()
        upstream = stream_within(self._client_for(text), request, self.deadlines)
        try:
            first = await upstream.__anext__()
        except StopAsyncIteration:
            exc = UpstreamError(f"model {self.alias} ended the stream without any chunk",
                                details={"model": self.alias})
            self._settle(permit, exc, started)
            slot.release()
            raise exc from None
        except BaseException as exc:
            self._settle(permit, exc, started)
            slot.release()
            await upstream.aclose()
            raise
        return LiveStream(self, upstream, first, slot, permit, started)


class LiveStream:
    """A stream past its first content. Later failures become one error chunk, then the end;
    the breaker and statistics learn the outcome when it finishes."""

    def __init__(self, model: GuardedModel, upstream: AsyncIterator[ChatChunk], first: ChatChunk,
                 slot: AdmissionSlot, permit: BreakerPermit, started: float):
        self.model = model
        self._upstream = upstream
        self._first: Optional[ChatChunk] = first
        self._slot = slot
        self._permit = permit
        self._started = started
        self._finished = False
        self.error: Optional[BaseException] = None

    def __aiter__(self) -> "LiveStream":
        return self

    async def __anext__(self) -> ChatChunk:
        if self._first is not None:
            chunk, self._first = self._first, None
            return chunk
        if self._finished:
            raise StopAsyncIteration
        try:
            return await self._upstream.__anext__()
        except StopAsyncIteration:
            self._finish(None)
            raise
        except asyncio.CancelledError:
            await self.aclose()
            raise
        except Exception as exc:
            self.error = exc
            self._finish(exc)
            return error_chunk(exc, self.model.alias)

    async def aclose(self) -> None:
        """Stop early (client went away): neither a success nor a failure of the model."""
        if not self._finished:
            self._finished = True
            self._permit.release()
            self._slot.release()
            closer = getattr(self._upstream, "aclose", None)
            if closer is not None:
                await closer()

    def _finish(self, exc: Optional[BaseException]) -> None:
        self._finished = True
        self.model._settle(self._permit, exc, self._started)
        self._slot.release()


class GuardedClient:
    """A :class:`~serve_app.fleet.protocol.ModelClient` over one guarded model, at one priority."""

    def __init__(self, model: GuardedModel, priority: int):
        self.alias = model.alias
        self._model = model
        self._priority = priority

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return await self._model.complete(request, self._priority)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        async for chunk in self._stream(request, text=False):
            yield chunk

    async def complete_text(self, request: ChatRequest) -> ChatResponse:
        return await self._model.complete(request, self._priority, text=True)

    async def stream_text(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        async for chunk in self._stream(request, text=True):
            yield chunk

    async def _stream(self, request: ChatRequest, text: bool) -> AsyncIterator[ChatChunk]:
        live = await self._model.open_stream(request, self._priority, text=text)
        try:
            async for chunk in live:
                yield chunk
        finally:
            await live.aclose()
