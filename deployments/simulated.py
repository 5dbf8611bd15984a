"""SIMULATED LLM engine: a stand-in model for load and fault tests of the graph.

It is not a model. It reproduces what the graph around a model must cope with: time to first
token, time per output token, a limited number of sequences decoded at once (excess requests
wait, and the wait is reported like vLLM's ``num_requests_waiting``), token streaming, and
injected faults (errors, empty outputs, hangs, malformed JSON). Its text says it is simulated
and is deterministic for a given prompt. The fault profile is the deployment's ``user_config``,
so a test can change it on live replicas without restarting them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
import uuid
from typing import Any, AsyncIterator

from ray import serve

from .engine_stats import engine_autoscaling_stats
from .gateway_demand import GatewayDemandReader, replica_autoscaling_stats
from serve_app.config.models import SimulatedSettings
from serve_app.messages.view import estimate_tokens

_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
          "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


class SimulatedEngineError(RuntimeError):
    """An injected engine failure (the kind a crashed or overloaded engine produces)."""


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


class SimulatedEngine:
    """The engine itself, usable in-process (unit tests) or inside the deployment below."""

    def __init__(self, alias: str, settings: SimulatedSettings, latency_scale: float = 1.0,
                 max_model_len: int = 4096):
        self.alias = alias
        self.max_model_len = max_model_len
        self._global_scale = latency_scale
        self.configure(settings)
        self.running = 0
        self.waiting = 0
        self.served = 0

    def configure(self, settings: SimulatedSettings) -> None:
        self.settings = settings
        self._slots = asyncio.Semaphore(settings.max_num_seqs)
        self._rng = random.Random(settings.seed)

    # ------------------------------------------------------------------ helpers
    @property
    def _scale(self) -> float:
        return self.settings.latency_scale * self._global_scale

    def stats(self) -> dict[str, Any]:
        return {"alias": self.alias, "running": self.running, "waiting": self.waiting,
                "served": self.served, "max_num_seqs": self.settings.max_num_seqs}

    def _plan(self, request: dict[str, Any]) -> tuple[list[str], str, dict | None]:
        """Decide the whole output up front: tokens, finish reason, optional tool call."""
        s = self.settings
        messages = request.get("messages") or []
        prompt_tokens = estimate_tokens(messages)
        if prompt_tokens > self.max_model_len:
            raise SimulatedEngineError(
                f"prompt of {prompt_tokens} tokens exceeds max_model_len {self.max_model_len}")
        roll = self._rng.random()
        if roll < s.error_rate:
            raise SimulatedEngineError(f"simulated engine failure in {self.alias}")
        if roll < s.error_rate + s.empty_rate:
            return [], "stop", None
        tools = request.get("tools") or []
        if tools and request.get("tool_choice") != "none" and messages and messages[-1].get("role") != "tool":
            fn = tools[0].get("function", {})
            call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                    "function": {"name": fn.get("name", "tool"),
                                 "arguments": json.dumps({"query": _last_user_text(messages)[:80]})}}
            return [], "tool_calls", call
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        n = min(limit, s.output_tokens) if limit else s.output_tokens
        finish = "length" if limit and limit < s.output_tokens else "stop"
        digest = hashlib.sha256((self.alias + json.dumps(messages, sort_keys=True, default=str)).encode()).digest()
        words = [_WORDS[digest[i % len(digest)] % len(_WORDS)] for i in range(max(0, n - 3))]
        body = f"[simulated {self.alias}] " + " ".join(words)
        if s.output_style == "json":
            body = json.dumps({"model": self.alias, "simulated": True, "answer": " ".join(words)})
        elif s.output_style == "fenced_json":
            body = "```json\n" + json.dumps({"model": self.alias, "simulated": True, "answer": " ".join(words)}) + "\n```"
        elif s.output_style == "broken_json":
            body = '{"model": "' + self.alias + '", "simulated": true, "answer": "' + " ".join(words)
        # Stream the text in pieces, one per simulated token. Prose is cut at n tokens; a JSON
        # body is always sent whole (its style, not a length cut, decides whether it is valid).
        pieces = body.split(" ")
        tokens = [p + (" " if i < len(pieces) - 1 else "") for i, p in enumerate(pieces)]
        if s.output_style != "text":
            return tokens, finish, None
        return tokens[:max(n, 1)] if n else [], finish, None

    async def _hang_or_wait(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)

    # ------------------------------------------------------------------ generation
    async def generate(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yield chat.completion.chunk dicts; the first one after TTFT."""
        s = self.settings
        rid = f"chatcmpl-sim-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            if self._rng.random() < s.hang_rate:
                await asyncio.Event().wait()  # never answers; the caller's timeout must fire
            tokens, finish, tool_call = self._plan(request)
            await self._hang_or_wait(s.ttft_ms / 1000 * self._scale)
            base = {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": self.alias}
            yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]}
            if tool_call is not None:
                yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **tool_call}]},
                                            "finish_reason": None}]}
            for i, tok in enumerate(tokens):
                if i:
                    await self._hang_or_wait(s.tpot_ms / 1000 * self._scale)
                yield {**base, "choices": [{"index": 0, "delta": {"content": tok}, "finish_reason": None}]}
            usage = {"prompt_tokens": estimate_tokens(request.get("messages") or []),
                     "completion_tokens": len(tokens) + (1 if tool_call else 0)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}
            self.served += 1
        finally:
            self.running -= 1
            self._slots.release()

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        content, tool_calls, finish, usage, rid, created = [], [], "stop", None, "", 0
        async for chunk in self.generate(request):
            rid, created = chunk["id"], chunk["created"]
            choice = chunk["choices"][0]
            delta = choice["delta"]
            content.append(delta.get("content") or "")
            for tc in delta.get("tool_calls") or []:
                tool_calls.append({k: v for k, v in tc.items() if k != "index"})
            finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or ("" if not tool_calls else None)}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {"id": rid, "object": "chat.completion", "created": created, "model": self.alias,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage}


@serve.deployment(name="simulated")
class SimulatedLLMDeployment:
    """Ray Serve deployment wrapping :class:`SimulatedEngine` (clearly not a real model)."""

    def __init__(self, alias: str, max_model_len: int = 4096, latency_scale: float = 1.0):
        self.alias = alias
        self._max_model_len = max_model_len
        self._latency_scale = latency_scale
        self.engine: SimulatedEngine | None = None
        self._demand_reader: GatewayDemandReader | None = None

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        settings = SimulatedSettings.model_validate(user_config or {})
        if self.engine is None:
            self.engine = SimulatedEngine(self.alias, settings, self._latency_scale, self._max_model_len)
        else:
            self.engine.configure(settings)

    def _engine(self) -> SimulatedEngine:
        if self.engine is None:  # deployed without user_config
            self.reconfigure({})
        assert self.engine is not None
        return self.engine

    async def chat(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._engine().complete(request)

    async def chat_stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self._engine().generate(request):
            yield chunk

    async def stats(self) -> dict[str, Any]:
        return self._engine().stats()

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Engine queue figures, and the requests waiting for this deployment in the gateway's
        priority lines, for the queue-depth autoscaling policy (Serve polls this)."""
        if self._demand_reader is None:
            self._demand_reader = GatewayDemandReader.for_this_replica()
        return await replica_autoscaling_stats(engine_autoscaling_stats(self._engine().stats()),
                                               self._demand_reader)
