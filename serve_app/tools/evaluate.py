"""``horizon eval``: replay a labelled request set against a running endpoint (SPEC §8).

Each JSONL line is a chat request with its true task type::

    {"messages": [...], "label": "code", "expect_json": true}
    {"messages": [...], "label": "summary", "response_format": {"type": "json_schema", ...}}

and the report gives, overall and per task type, the seed's four metrics:

* **routing accuracy**: the ``x-vsr-task-type`` header equals the label (no header counts as
  wrong: the request was not routed as labelled);
* **end-to-end success**: HTTP 200 with a non-empty answer (or tool calls), and where the item
  demands JSON (``expect_json`` or a JSON ``response_format``) content that parses as JSON and
  satisfies the item's schema;
* **timeout rate**: HTTP 504 or the client's own timeout;
* **fallback rate**: an ``x-vsr-fallback`` header is present (another model served or was
  tried).

Written as a markdown table (stdout and ``eval.md``) and JSON (``eval.json``, with every
item's outcome). Requests run with bounded concurrency against a loopback endpoint only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import httpx
from jsonschema import exceptions as schema_exceptions
from jsonschema import validators
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config.base import TaskType
from ..config.arguments import fraction, positive_number, whole_number
from .http import (DEFAULT_URL, CallResult, ToolUsageError, ensure_listening, loopback_base_url, make_client,
                   post_json)
from .tables import markdown_table

DEFAULT_MODEL = "vllm-sr/auto"


class EvalItem(BaseModel):
    """One labelled request. Unknown keys are errors (a typo must not silently drop a check)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(..., min_length=1)
    label: TaskType
    expect_json: bool = False
    response_format: Optional[dict[str, Any]] = None
    # Defaults to the auto-routing slug; a fleet alias or Fusion slug evaluates that entry point.
    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    id: Optional[str] = None

    @property
    def demands_json(self) -> bool:
        kind = (self.response_format or {}).get("type")
        return self.expect_json or kind in ("json_object", "json_schema")

    @property
    def schema(self) -> Optional[dict[str, Any]]:
        fmt = self.response_format or {}
        if fmt.get("type") != "json_schema":
            return None
        schema = (fmt.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else None

    def body(self, default_model: str, max_tokens: Optional[int]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model or default_model, "messages": self.messages}
        if self.response_format is not None:
            body["response_format"] = self.response_format
        limit = self.max_tokens or max_tokens
        if limit is not None:
            body["max_tokens"] = limit
        return body


def load_items(path: str | Path) -> list[EvalItem]:
    items: list[EvalItem] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ToolUsageError(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            items.append(EvalItem.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ToolUsageError(f"{path}:{number}: not JSON: {exc.msg}") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ToolUsageError(f"{path}:{number}: {where}: {err['msg']}") from None
    if not items:
        raise ToolUsageError(f"{path}: no items")
    return items


@dataclass
class ItemOutcome:
    index: int
    id: Optional[str]
    label: str
    routed_task_type: Optional[str]
    selected_model: Optional[str]
    status: Optional[int]
    latency_s: float
    routed_correctly: bool
    success: bool
    timed_out: bool
    fallback: Optional[str]
    problem: Optional[str]


def _json_problem(item: EvalItem, content: str) -> Optional[str]:
    try:
        value = json.loads(content)
    except json.JSONDecodeError as exc:
        return f"answer is not valid JSON ({exc.msg})"
    schema = item.schema
    if schema is None:
        return None
    try:
        validator_cls = validators.validator_for(schema)
        error = schema_exceptions.best_match(validator_cls(schema).iter_errors(value))
    except schema_exceptions.SchemaError as exc:
        return f"the item's schema is invalid: {exc.message}"
    return f"answer breaks the schema: {error.message}" if error is not None else None


def judge(index: int, item: EvalItem, result: CallResult) -> ItemOutcome:
    routed = result.headers.get("x-vsr-task-type")
    fallback = result.headers.get("x-vsr-fallback") or None
    problem: Optional[str] = None
    if not result.ok:
        problem = result.error_message + (f" ({result.error_code})" if result.error_code else "")
    elif not result.content.strip() and not result.message.get("tool_calls"):
        problem = "empty answer"
    elif item.demands_json:
        problem = _json_problem(item, result.content)
    return ItemOutcome(index=index, id=item.id, label=item.label, routed_task_type=routed,
                       selected_model=result.headers.get("x-vsr-selected-model"),
                       status=result.status, latency_s=round(result.elapsed_s, 4),
                       routed_correctly=routed == item.label, success=problem is None,
                       timed_out=result.timed_out, fallback=fallback, problem=problem)


@dataclass
class Metrics:
    group: str
    requests: int
    routing_accuracy: float
    success_rate: float
    timeout_rate: float
    fallback_rate: float
    p50_latency_s: float
    p95_latency_s: float


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def metrics_of(group: str, outcomes: list[ItemOutcome]) -> Metrics:
    n = len(outcomes)
    latencies = [o.latency_s for o in outcomes]

    def rate(flags) -> float:
        return round(sum(1 for f in flags if f) / n, 4) if n else 0.0

    return Metrics(group=group, requests=n,
                   routing_accuracy=rate(o.routed_correctly for o in outcomes),
                   success_rate=rate(o.success for o in outcomes),
                   timeout_rate=rate(o.timed_out for o in outcomes),
                   fallback_rate=rate(o.fallback is not None for o in outcomes),
                   p50_latency_s=round(_percentile(latencies, 50), 4),
                   p95_latency_s=round(_percentile(latencies, 95), 4))


def summarize(outcomes: list[ItemOutcome]) -> list[Metrics]:
    """Overall first, then one row per task type in label order of first appearance."""
    labels = list(dict.fromkeys(o.label for o in outcomes))
    return [metrics_of("overall", outcomes),
            *(metrics_of(label, [o for o in outcomes if o.label == label]) for label in labels)]


def render_markdown(rows: list[Metrics]) -> str:
    def pct(x: float) -> str:
        return f"{100 * x:.1f} %"

    return markdown_table(
        ["task type", "requests", "routing accuracy", "e2e success", "timeout rate", "fallback rate",
         "p50 latency", "p95 latency"],
        [[m.group, m.requests, pct(m.routing_accuracy), pct(m.success_rate), pct(m.timeout_rate),
          pct(m.fallback_rate), f"{m.p50_latency_s:.2f} s", f"{m.p95_latency_s:.2f} s"] for m in rows])


@dataclass(frozen=True)
class EvalSettings:
    concurrency: int = 4
    request_timeout_s: float = 180.0
    default_model: str = DEFAULT_MODEL
    # Applied to items without their own max_tokens; None = the endpoint's default.
    max_tokens: Optional[int] = None


async def run_eval(items: list[EvalItem], url: str = DEFAULT_URL, *,
                   settings: EvalSettings = EvalSettings(), api_key: Optional[str] = None,
                   transport: Optional[httpx.AsyncBaseTransport] = None) -> list[ItemOutcome]:
    base = loopback_base_url(url)
    if settings.concurrency < 1:
        raise ToolUsageError("--concurrency must be at least 1")
    gate = asyncio.Semaphore(settings.concurrency)
    async with make_client(base, api_key=api_key, timeout_s=settings.request_timeout_s,
                           max_connections=settings.concurrency, transport=transport) as client:
        await ensure_listening(client)

        async def one(index: int, item: EvalItem) -> ItemOutcome:
            async with gate:
                result = await post_json(client, "/v1/chat/completions",
                                         item.body(settings.default_model, settings.max_tokens))
            return judge(index, item, result)

        return list(await asyncio.gather(*(one(i, item) for i, item in enumerate(items))))


def write_report(out_dir: str | Path, rows: list[Metrics], outcomes: list[ItemOutcome],
                 source: dict[str, Any]) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out / "eval.md", out / "eval.json"
    md_path.write_text(render_markdown(rows) + "\n", encoding="utf-8")
    json_path.write_text(json.dumps({**source, "summary": [asdict(m) for m in rows],
                                     "items": [asdict(o) for o in outcomes]}, indent=2),
                         encoding="utf-8")
    return md_path, json_path


# --------------------------------------------------------------------------- command line


def register(parser: argparse.ArgumentParser) -> None:
    defaults = EvalSettings()
    parser.description = "Replay a labelled JSONL request set against a running endpoint and report " \
                         "routing accuracy, end-to-end success, timeout and fallback rates."
    parser.add_argument("--url", default=DEFAULT_URL, help=f"endpoint base URL (default {DEFAULT_URL})")
    parser.add_argument("--input", required=True, help="labelled requests (JSONL)")
    parser.add_argument("--out", default="eval-results", help="directory for eval.md and eval.json")
    parser.add_argument("--concurrency", type=whole_number(1), default=defaults.concurrency)
    parser.add_argument("--timeout", type=positive_number, default=defaults.request_timeout_s, metavar="SECONDS",
                        help="per-request client timeout (counted as a timeout)")
    parser.add_argument("--model", default=defaults.default_model,
                        help=f"model for items that name none (default {DEFAULT_MODEL})")
    parser.add_argument("--max-tokens", type=whole_number(1), default=None)
    parser.add_argument("--api-key", default=os.environ.get("HORIZON_API_KEY"),
                        help="Bearer key when auth is enabled (default: $HORIZON_API_KEY)")
    parser.add_argument("--min-success", type=fraction, default=None, metavar="RATE",
                        help="exit 1 when the overall end-to-end success rate is below RATE (0-1)")
    parser.add_argument("--min-routing-accuracy", type=fraction, default=None, metavar="RATE",
                        help="exit 1 when the overall routing accuracy is below RATE (0-1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = EvalSettings(concurrency=args.concurrency, request_timeout_s=args.timeout,
                            default_model=args.model, max_tokens=args.max_tokens)
    try:
        items = load_items(args.input)
        outcomes = asyncio.run(run_eval(items, args.url, settings=settings, api_key=args.api_key))
    except ToolUsageError as exc:
        print(f"horizon eval: {exc}", file=sys.stderr)
        return 2
    rows = summarize(outcomes)
    md_path, json_path = write_report(args.out, rows, outcomes,
                                      {"url": args.url, "input": str(args.input),
                                       "concurrency": settings.concurrency})
    print(render_markdown(rows))
    print(f"\nwrote {md_path} and {json_path}")
    overall = rows[0]
    failures = []
    if all(o.status is None and not o.timed_out for o in outcomes):
        failures.append("the endpoint answered no request (is it running?)")
    if args.min_success is not None and overall.success_rate < args.min_success:
        failures.append(f"success rate {overall.success_rate:.3f} < {args.min_success}")
    if args.min_routing_accuracy is not None and overall.routing_accuracy < args.min_routing_accuracy:
        failures.append(f"routing accuracy {overall.routing_accuracy:.3f} < {args.min_routing_accuracy}")
    for failure in failures:
        print(f"eval: FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0
