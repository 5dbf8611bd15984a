"""``horizon route``: route a JSONL file of chat requests in-process, with the real embedding model.

No Ray cluster: the profile's embedding model is loaded in this process. Escalations (intent
score below threshold) go to one of three classifiers, and the output says which:

- ``--no-llm``: none; escalations are reported as ``unknown`` (and counted as escalations);
- ``--llm-url URL``: an OpenAI-compatible endpoint serving the classifier model (``k2``);
- neither: the profile's k2 vLLM engine, loaded in-process with the profile's engine settings.

Each output line is JSON: ``task_type``, ``decision``, ``model``, ``confidence``, ``signals``,
``latency_ms`` (and ``label``/``correct`` with ``--labels``). With ``--labels`` a report follows
on stderr: accuracy per intent, the confusion matrix and the k2 escalation rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, TextIO

from ..fleet.protocol import EmbeddingClient, ModelClient
from ..config.loader import ConfigError, load_config
from ..config.base import TASK_TYPES
from ..config.schema import HorizonConfig
from ..errors import HorizonError, InvalidRequest, UpstreamError
from .router import Router, RoutingResult
from .signals.classifier import LABEL_SCHEMA


# --------------------------------------------------------------------------- classifiers


class OpenAIEndpointClient:
    """ModelClient over any OpenAI-compatible HTTP endpoint (non-streaming is all routing needs)."""

    def __init__(self, base_url: str, model: str, api_key: Optional[str] = None, timeout_s: float = 60.0):
        from openai import AsyncOpenAI

        self.alias = model
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY", "none"),
                                   timeout=timeout_s, max_retries=0)

    async def complete(self, request: dict) -> dict:
        body = {k: v for k, v in request.items() if k not in ("model", "stream")}
        try:
            response = await self._client.chat.completions.create(model=self.alias, **body)
        except Exception as exc:
            raise UpstreamError(f"classifier endpoint failed: {exc}") from exc
        return response.model_dump()

    async def stream(self, request: dict):  # pragma: no cover - routing never streams
        raise NotImplementedError("the offline classifier client does not stream")
        yield {}


class InProcessVllmClient:
    """ModelClient over a vLLM engine in this process, built from the profile's k2 settings.

    Loading k2 needs its GPUs (TP8 on the fleet); on the CPU profile it is the tiny SmolLM2
    engine (tests/e2e/test_route_cli_real_classifier.py).
    """

    def __init__(self, cfg: HorizonConfig, alias: str):
        model = cfg.model(alias)
        if model.shares_engine_with:
            model = cfg.model(model.shares_engine_with)
        if model.backend != "vllm":
            raise ValueError(f"model {alias!r} has backend {model.backend!r}, not vllm: pass --no-llm "
                             "or --llm-url to classify escalations")
        self.alias = alias
        self._model = model
        self._llm: Any = None
        # Escalations arrive concurrently (each in a worker thread) but ``vllm.LLM`` is neither
        # thread-safe nor cheap to start: one engine, one call at a time.
        self._lock = threading.Lock()

    def _start_engine(self) -> Any:
        from serve_app.fleet.backends.vllm import engine_kwargs
        from deployments.model_assets import resolve_model_path

        os.environ.update(self._model.engine.env)
        # stdout carries the JSON lines; vLLM logs to stdout unless told otherwise.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        from vllm import LLM

        return LLM(model=resolve_model_path(self._model.engine.model),
                   **engine_kwargs(self._model, frontend=False))

    def _engine(self) -> Any:
        """The engine, started on first use; callers hold ``self._lock``."""
        if self._llm is None:
            self._llm = self._start_engine()
        return self._llm

    async def start(self) -> None:
        """Start the engine and answer one warm-up chat before any request is routed.

        Started lazily inside the first escalation, the engine's start-up (about a minute on
        CPU) ran under the classifier's ``timeout_s``: every attempt timed out, and the
        abandoned calls kept the lock, so later escalations timed out behind them too. The
        first chat after start-up is slow as well (chat template detection, first kernels: over
        10 s on a loaded 2-core CI machine), and so is the first constrained one (the structured
        output backend builds its tables for the vocabulary and compiles the grammar), so the
        warm-up is a chat constrained by the classifier's own label schema.
        """
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        warm_up = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(json=LABEL_SCHEMA))

        def start_locked() -> None:
            with self._lock:
                self._engine().chat([{"role": "user", "content": "hi"}], warm_up, use_tqdm=False)

        await asyncio.to_thread(start_locked)

    def _generate(self, request: dict) -> dict:
        # vLLM itself is imported only when an escalation needs the in-process engine.
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        # The classifier's response_format, as the engine's own structured-output constraint
        # (what the vLLM deployment does for the same request through the OpenAI protocol).
        schema = ((request.get("response_format") or {}).get("json_schema") or {}).get("schema")
        params = SamplingParams(temperature=request.get("temperature") or 0.0,
                                max_tokens=request.get("max_tokens") or 32,
                                structured_outputs=StructuredOutputsParams(json=schema) if schema else None)
        with self._lock:
            [output] = self._engine().chat(request["messages"], params, use_tqdm=False)
        text = output.outputs[0].text
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "model": self.alias,
                "created": int(time.time()),
                "choices": [{"index": 0, "finish_reason": output.outputs[0].finish_reason,
                             "message": {"role": "assistant", "content": text}}]}

    async def complete(self, request: dict) -> dict:
        return await asyncio.to_thread(self._generate, request)

    async def stream(self, request: dict):  # pragma: no cover - routing never streams
        raise NotImplementedError("the offline classifier client does not stream")
        yield {}


def local_embedder(cfg: HorizonConfig) -> EmbeddingClient:
    """The profile's embedding model, loaded in this process."""
    if cfg.embedding_model is None:
        raise ValueError("the profile has no embedding model (backend: embedding)")
    from deployments.embedding import LocalEmbeddingClient, load_encoder

    return LocalEmbeddingClient(load_encoder(cfg.embedding_model))


# --------------------------------------------------------------------------- routing a file


@dataclass
class RoutedItem:
    index: int
    result: Optional[RoutingResult]
    latency_ms: float
    label: Optional[str] = None
    error: Optional[str] = None

    @property
    def predicted(self) -> str:
        return self.result.task_type if self.result else "error"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.result is not None:
            r = self.result.to_dict()
            out.update(task_type=r["task_type"], decision=r["decision"], model=r["model"],
                       confidence=r["confidence"], escalated=r["escalated"], signals=r["signals"],
                       classifier_ms=r["classifier_ms"])
        else:
            out.update(task_type="error", error=self.error)
        out["latency_ms"] = round(self.latency_ms, 3)
        if self.label is not None:
            out.update(label=self.label, correct=self.predicted == self.label)
        return out


def read_items(lines: Iterable[str]) -> list[dict[str, Any]]:
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n}: not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise ValueError(f"line {n}: expected a JSON object")
        items.append(item)
    return items


async def route_items(router: Router, items: list[dict[str, Any]]) -> list[RoutedItem]:
    """Route items one at a time (latency per decision is what is measured)."""
    out = []
    for i, item in enumerate(items):
        started = time.perf_counter()
        label = item.get("label")
        try:
            result = await router.route({"messages": item.get("messages")})
            out.append(RoutedItem(i, result, (time.perf_counter() - started) * 1000, label))
        except InvalidRequest as exc:  # a bad line is reported, the run goes on
            out.append(RoutedItem(i, None, (time.perf_counter() - started) * 1000, label, exc.message))
    return out


@dataclass
class EvalReport:
    labels: list[str]
    total: int
    correct: int
    escalated: int
    # confusion[label][predicted] = count
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def escalation_rate(self) -> float:
        return self.escalated / self.total if self.total else 0.0

    def per_intent(self) -> dict[str, tuple[int, int]]:
        """label -> (correct, total)."""
        return {lab: (row.get(lab, 0), sum(row.values())) for lab, row in self.confusion.items()}

    def format(self, escalation_mode: str) -> str:
        columns = [t for t in TASK_TYPES] + sorted({p for row in self.confusion.values() for p in row} - set(TASK_TYPES))
        lines = [f"items: {self.total}   accuracy: {self.accuracy:.1%} ({self.correct}/{self.total})   "
                 f"k2 escalations: {self.escalation_rate:.1%} ({self.escalated}/{self.total}; {escalation_mode})",
                 "", "per-intent accuracy:"]
        for label, (ok, n) in self.per_intent().items():
            lines.append(f"  {label:<10} {ok / n:7.1%}  ({ok}/{n})")
        width = max(8, *(len(c) + 1 for c in columns))
        lines += ["", "confusion matrix (rows: label, columns: predicted):",
                  " " * 11 + "".join(f"{c:>{width}}" for c in columns)]
        for label, row in self.confusion.items():
            lines.append(f"  {label:<9}" + "".join(f"{row.get(c, 0):>{width}}" for c in columns))
        return "\n".join(lines)


def evaluate(items: list[RoutedItem]) -> EvalReport:
    labelled = [i for i in items if i.label is not None]
    order = [t for t in TASK_TYPES if any(i.label == t for i in labelled)]
    order += sorted({i.label for i in labelled} - set(order))
    confusion: dict[str, dict[str, int]] = {label: {} for label in order}
    for item in labelled:
        row = confusion[item.label]
        row[item.predicted] = row.get(item.predicted, 0) + 1
    return EvalReport(labels=order, total=len(labelled),
                      correct=sum(1 for i in labelled if i.predicted == i.label),
                      escalated=sum(1 for i in labelled if i.result is not None and i.result.escalated),
                      confusion=confusion)


def latency_summary(items: list[RoutedItem]) -> str:
    values = sorted(i.latency_ms for i in items)
    if not values:
        return "no items"
    p = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"latency per decision: p50 {p(0.5):.1f} ms, p95 {p(0.95):.1f} ms, max {values[-1]:.1f} ms"


# --------------------------------------------------------------------------- command


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="profile YAML, e.g. configs/sim.yaml")
    parser.add_argument("--input", required=True, help="JSONL of chat requests ({'messages': [...]})")
    parser.add_argument("--labels", action="store_true", help="inputs carry 'label'; print accuracy report")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--no-llm", action="store_true", help="report escalations as 'unknown'")
    group.add_argument("--llm-url", help="OpenAI-compatible endpoint of the classifier model")
    parser.add_argument("--output", help="write JSON lines here instead of stdout")
    parser.set_defaults(func=run)


def build_classifier(args: argparse.Namespace, cfg: HorizonConfig) -> tuple[Optional[ModelClient], str]:
    """The escalation classifier and a sentence saying what it is."""
    alias = cfg.routing.signals.intent.classifier.model
    if args.no_llm:
        return None, "--no-llm: escalations reported as 'unknown'"
    if args.llm_url:
        return OpenAIEndpointClient(args.llm_url, alias), f"escalations classified by {alias!r} at {args.llm_url}"
    return InProcessVllmClient(cfg, alias), f"escalations classified by the profile's {alias!r} vLLM engine in-process"


async def _run(args: argparse.Namespace, cfg: HorizonConfig, embedder_factory: Callable[[HorizonConfig], EmbeddingClient],
               out: TextIO, err: TextIO) -> int:
    with open(args.input, encoding="utf-8") as fh:
        items = read_items(fh)
    classifier, mode = build_classifier(args, cfg)
    print(f"horizon route: {len(items)} requests, profile {cfg.profile}; {mode}", file=err)
    router = Router(cfg, embedder_factory(cfg), classifier)
    await router.start()
    if isinstance(classifier, InProcessVllmClient):
        print(f"horizon route: starting the {classifier.alias!r} engine before routing", file=err)
        await classifier.start()
    routed = await route_items(router, items)
    for item in routed:
        out.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
    print(latency_summary(routed), file=err)
    if args.labels:
        missing = sum(1 for i in routed if i.label is None)
        if missing:
            print(f"warning: {missing} items have no label and are not scored", file=err)
        print(evaluate(routed).format(mode), file=err)
    return 0


def run(args: argparse.Namespace, *, embedder_factory: Callable[[HorizonConfig], EmbeddingClient] = local_embedder,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    err = err or sys.stderr
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=err)
        return 1
    close = None
    try:
        if out is None:
            out = close = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
        return asyncio.run(_run(args, cfg, embedder_factory, out, err))
    except (ValueError, OSError, HorizonError) as exc:
        print(f"horizon route: {exc}", file=err)
        return 1
    finally:
        if close is not None and close is not sys.stdout:
            close.close()
