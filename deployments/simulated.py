"""SIMULATED LLM engine: a stand-in model for load and fault tests of the graph.

It is not a model. It reproduces what the graph around a model must cope with: time to first
token, time per output token, a limited number of sequences decoded at once (excess requests
wait, and the wait is reported like vLLM's ``num_requests_waiting``), token streaming, and
injected faults (errors, empty outputs, hangs, malformed JSON). Like a grammar-constrained
engine it answers ``response_format`` json_object / json_schema with conforming JSON and
``tools`` with a call whose arguments validate against the tool's parameters
(:mod:`.schema_sample`); it serves ``n`` choices and text completions (``prompt``). Its
text says it is simulated and is deterministic for a given prompt. The fault profile is the deployment's ``user_config``,
so a test can change it on live replicas without restarting them.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import time
import uuid
from typing import Any, AsyncIterator

from ray import serve

from .engine_stats import engine_autoscaling_stats
from .gateway_demand import GatewayDemandReader, replica_autoscaling_stats
from .schema_sample import sample
from serve_app.config.models import SimulatedSettings
from serve_app.messages.view import estimate_tokens
from serve_app.observability.replica_logs import start_replica_logging

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
        # Response ids: this engine's random prefix and a counter, unique across replicas like
        # uuid4's (which costs a system call and more per answer of a zero-latency benchmark).
        self._id_prefix = uuid.uuid4().hex[:8]
        self._ids = itertools.count()

    def configure(self, settings: SimulatedSettings) -> None:
        self.settings = settings
        self._slots = asyncio.Semaphore(settings.max_num_seqs)
        self._rng = random.Random(settings.seed)

    # ------------------------------------------------------------------ helpers
    @property
    def _scale(self) -> float:
        return self.settings.latency_scale * self._global_scale

    def _next_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids):08x}"

    def stats(self) -> dict[str, Any]:
        return {"alias": self.alias, "running": self.running, "waiting": self.waiting,
                "served": self.served, "max_num_seqs": self.settings.max_num_seqs}

    def _check_and_roll(self, prompt_tokens: int) -> bool:
        """Raise an injected failure or a context overflow; True when the answer is empty."""
        s = self.settings
        if prompt_tokens > self.max_model_len:
            raise SimulatedEngineError(
                f"prompt of {prompt_tokens} tokens exceeds max_model_len {self.max_model_len}")
        roll = self._rng.random()
        if roll < s.error_rate:
            raise SimulatedEngineError(f"simulated engine failure in {self.alias}")
        return roll < s.error_rate + s.empty_rate

    def _prose(self, seed_text: str, limit: int | None) -> tuple[list[str], str]:
        s = self.settings
        n = min(limit, s.output_tokens) if limit else s.output_tokens
        finish = "length" if limit and limit < s.output_tokens else "stop"
        digest = hashlib.sha256((self.alias + seed_text).encode()).digest()
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
        tokens = _pieces(body)
        if s.output_style != "text":
            return tokens, finish
        return (tokens[:max(n, 1)] if n else []), finish

    def _structured(self, request: dict[str, Any], seed: int, words: list[str]) -> list[str] | None:
        """JSON that conforms to ``response_format`` (what a grammar-constrained engine gives),
        or None when the request asks for text. A fault ``output_style`` wins over it."""
        fmt = request.get("response_format") or {}
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if self.settings.output_style != "text" or kind not in ("json_object", "json_schema"):
            return None
        schema = (fmt.get("json_schema") or {}).get("schema") if kind == "json_schema" else None
        if schema is None:
            value: Any = {"model": self.alias, "simulated": True, "answer": " ".join(words[:8]) or "ok"}
        else:
            value = sample(schema, seed, words)
        return _pieces(json.dumps(value, ensure_ascii=False))

    def _tool_call(self, request: dict[str, Any], seed: int, words: list[str]) -> dict | None:
        """A call of the named tool (tool_choice), else of the first one, with arguments that
        validate against its parameters; none when the turn answers a tool result."""
        tools = request.get("tools") or []
        choice = request.get("tool_choice")
        messages = request.get("messages") or []
        if not tools or choice == "none" or (messages and messages[-1].get("role") == "tool"):
            return None
        tool = tools[0]
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            tool = next((t for t in tools if (t.get("function") or {}).get("name") == name), tool)
        fn = tool.get("function") or {}
        arguments = sample(fn.get("parameters") or {"type": "object"}, seed, words)
        return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": fn.get("name", "tool"),
                             "arguments": json.dumps(arguments, ensure_ascii=False)}}

    def _plan(self, request: dict[str, Any]) -> tuple[int, list[tuple[list[str], str, dict | None]]]:
        """Decide every choice's whole output up front: tokens, finish reason, tool call; with
        the prompt's token count (the usage's, estimated once)."""
        messages = request.get("messages") or []
        prompt_tokens = estimate_tokens(messages)
        empty = self._check_and_roll(prompt_tokens)
        n = int(request.get("n") or 1)
        if empty:
            return prompt_tokens, [([], "stop", None) for _ in range(n)]
        words = _last_user_text(messages).split()
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        seed_text = json.dumps(messages, sort_keys=True, default=str)
        choices = []
        for i in range(n):
            call = self._tool_call(request, i, words)
            if call is not None:
                choices.append(([], "tool_calls", call))
                continue
            structured = self._structured(request, i, words)
            if structured is not None:
                choices.append((structured, "stop", None))
                continue
            tokens, finish = self._prose(seed_text + (f"#{i}" if i else ""), limit)
            choices.append((tokens, finish, None))
        return prompt_tokens, choices

    @staticmethod
    def _usage(prompt_tokens: int, plans: list[tuple[list[str], str, dict | None]]) -> dict[str, int]:
        """A tool call counts one token plus one per four characters of its arguments."""
        completion = sum(len(tokens) + (1 + len(call["function"]["arguments"]) // 4 if call else 0)
                         for tokens, _, call in plans)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion}

    async def _hang_or_wait(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)

    async def _slot(self) -> None:
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1

    async def _maybe_hang(self) -> None:
        if self._rng.random() < self.settings.hang_rate:
            await asyncio.Event().wait()  # never answers; the caller's timeout must fire

    def _release(self) -> None:
        self.running -= 1
        self._slots.release()

    # ------------------------------------------------------------------ generation
    async def generate(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yield chat.completion.chunk dicts; the first one after TTFT. With ``n`` > 1 the
        choices stream one after another, each chunk naming its choice's index."""
        s = self.settings
        rid = f"chatcmpl-sim-{self._next_id()}"
        created = int(time.time())
        await self._slot()
        try:
            await self._maybe_hang()
            prompt_tokens, plans = self._plan(request)
            await self._hang_or_wait(s.ttft_ms / 1000 * self._scale)
            base = {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": self.alias}

            def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                return {**base, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}

            for index, (tokens, finish, tool_call) in enumerate(plans):
                yield chunk(index, {"role": "assistant", "content": ""})
                if tool_call is not None:
                    yield chunk(index, {"tool_calls": [{"index": 0, **tool_call}]})
                for i, tok in enumerate(tokens):
                    if i:
                        await self._hang_or_wait(s.tpot_ms / 1000 * self._scale)
                    yield chunk(index, {"content": tok})
                if index < len(plans) - 1:
                    yield chunk(index, {}, finish)
            last = len(plans) - 1
            yield {**chunk(last, {}, plans[last][1]), "usage": self._usage(prompt_tokens, plans)}
            self.served += 1
        finally:
            self._release()

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """The whole answer at once: the stream's plan and timing (TTFT, then one time per output
        token for every token after a choice's first), without building the stream's chunks.
        A zero-latency engine is a benchmark's backend, so its own cost is part of the figure
        (which is also why the slot's try/finally is written out here as in :meth:`generate`:
        an async context manager around it cost 3 µs of the 15 in process)."""
        s = self.settings
        rid = f"chatcmpl-sim-{self._next_id()}"
        created = int(time.time())
        await self._slot()
        try:
            await self._maybe_hang()
            prompt_tokens, plans = self._plan(request)
            later_tokens = sum(max(0, len(tokens) - 1) for tokens, _, _ in plans)
            await self._hang_or_wait((s.ttft_ms + later_tokens * s.tpot_ms) / 1000 * self._scale)
            choices = []
            for index, (tokens, finish, tool_call) in enumerate(plans):
                message: dict[str, Any] = {"role": "assistant",
                                           "content": "".join(tokens) or ("" if tool_call is None else None)}
                if tool_call is not None:
                    message["tool_calls"] = [tool_call]
                choices.append({"index": index, "message": message, "finish_reason": finish})
            self.served += 1
        finally:
            self._release()
        return {"id": rid, "object": "chat.completion", "created": created, "model": self.alias,
                "choices": choices, "usage": self._usage(prompt_tokens, plans)}

    # ------------------------------------------------------------------ text completions
    async def generate_text(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yield ``text_completion`` chunks for ``prompt`` (a string or a list of strings; ``n``
        choices each, indexed prompt by prompt), then one usage chunk."""
        s = self.settings
        prompt = request.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else [str(p) for p in prompt or [""]]
        n = int(request.get("n") or 1)
        rid = f"cmpl-sim-{self._next_id()}"
        created = int(time.time())
        await self._slot()
        try:
            await self._maybe_hang()
            prompt_tokens = sum(estimate_tokens([{"role": "user", "content": p}]) for p in prompts)
            empty = self._check_and_roll(prompt_tokens)
            limit = request.get("max_tokens") or 16
            await self._hang_or_wait(s.ttft_ms / 1000 * self._scale)
            base = {"id": rid, "object": "text_completion", "created": created, "model": self.alias}
            completion_tokens = 0
            for p, text in enumerate(prompts):
                for i in range(n):
                    index = p * n + i
                    tokens, finish = ([], "stop") if empty else self._prose(text + (f"#{i}" if i else ""), limit)
                    # A completion continues the prompt: no "[simulated ...]" label in front.
                    tokens = tokens[2:] if len(tokens) > 2 and s.output_style == "text" else tokens
                    for j, tok in enumerate(tokens):
                        if j:
                            await self._hang_or_wait(s.tpot_ms / 1000 * self._scale)
                        yield {**base, "choices": [{"index": index, "text": (" " if j == 0 else "") + tok,
                                                    "logprobs": None, "finish_reason": None}]}
                    completion_tokens += len(tokens)
                    yield {**base, "choices": [{"index": index, "text": "", "logprobs": None,
                                                "finish_reason": finish}]}
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                     "total_tokens": prompt_tokens + completion_tokens}
            yield {**base, "choices": [], "usage": usage}
            self.served += 1
        finally:
            self._release()

    async def complete_text(self, request: dict[str, Any]) -> dict[str, Any]:
        rid, created, usage = "", 0, None
        texts: dict[int, list[str]] = {}
        finish: dict[int, str] = {}
        async for chunk in self.generate_text(request):
            rid, created = chunk["id"], chunk["created"]
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                texts.setdefault(choice["index"], []).append(choice["text"])
                if choice.get("finish_reason"):
                    finish[choice["index"]] = choice["finish_reason"]
        return {"id": rid, "object": "text_completion", "created": created, "model": self.alias,
                "choices": [{"index": i, "text": "".join(texts[i]), "logprobs": None,
                             "finish_reason": finish.get(i, "stop")} for i in sorted(texts)],
                "usage": usage}


def _pieces(body: str) -> list[str]:
    """The text as simulated tokens: one piece per word, each with its trailing space."""
    pieces = body.split(" ")
    return [p + (" " if i < len(pieces) - 1 else "") for i, p in enumerate(pieces)]


@serve.deployment(name="simulated")
class SimulatedLLMDeployment:
    """Ray Serve deployment wrapping :class:`SimulatedEngine` (clearly not a real model)."""

    def __init__(self, alias: str, max_model_len: int = 4096, latency_scale: float = 1.0):
        start_replica_logging()
        self.alias = alias
        self._max_model_len = max_model_len
        self._latency_scale = latency_scale
        self.engine: SimulatedEngine | None = None
        self._demand_reader: GatewayDemandReader | None = None

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        settings = SimulatedSettings.model_validate(user_config or {})
        if self.engine is None:
            # Serve runs the first reconfigure before the replica is RUNNING: the "weights load".
            await asyncio.sleep(settings.load_s)
            self.engine = SimulatedEngine(self.alias, settings, self._latency_scale, self._max_model_len)
        else:
            self.engine.configure(settings)

    def _engine(self) -> SimulatedEngine:
        if self.engine is None:  # deployed without user_config: the default profile
            self.engine = SimulatedEngine(self.alias, SimulatedSettings(), self._latency_scale, self._max_model_len)
        assert self.engine is not None
        return self.engine

    async def chat(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._engine().complete(request)

    async def chat_stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self._engine().generate(request):
            yield chunk

    async def completions(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._engine().complete_text(request)

    async def completions_stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self._engine().generate_text(request):
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
