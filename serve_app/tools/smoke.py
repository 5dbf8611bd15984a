"""``horizon smoke``: the seed's bring-up checklist against a running endpoint (SPEC §2).

Before a model is put behind the router it must pass, per model:

* **answers**: a chat completion comes back non-empty (embedding models: an embedding comes
  back), and that first inference finishes within the limit (5 minutes in the seed);
* **stable**: 10 consecutive temperature-0 runs of one prompt give the same text (embedding
  models: the same vector, to float rounding);
* **context**: an input longer than any context in the profile gets the clean 400
  ``context_length_exceeded``, not an engine crash or a 500 (embedding models: a text longer
  than the model embeds in one pass, not a silently cut vector);
* **concurrent**: 5 requests at once all succeed (no memory errors under parallel load;
  embedding models: 5 texts at once, each a vector of the model's size).

Models are checked in the bring-up order (embedding, vision, text models, coordinator last) and
reported as one table; the exit status is non-zero when any check fails. The requests go to
the endpoint's own ``model`` aliases, so they take the same path a client's direct request
takes (timeouts, breaker, fallbacks), and the ``x-vsr-selected-model`` header shows when a
fallback answered instead (reported, and a failure: the model itself did not answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import httpx

from ..config.loader import ConfigError, load_config
from ..config.models import ModelSettings
from ..config.schema import HorizonConfig
from . import local_cluster as lc
from ..config.arguments import positive_number, whole_number
from .http import (DEFAULT_URL, CallResult, ToolUsageError, ensure_listening, loopback_base_url, make_client,
                   post_json)
from .tables import markdown_table

# Bring-up order of SPEC §2: routing depends on embeddings, K2 comes last.
_ROLE_ORDER = {"embedding": 0, "vision": 1, "chat": 2, "reasoning": 3, "code": 4, "coordinator": 5}
CHECKS = ("answers", "stable", "context", "concurrent")
# Largest difference per component between two vectors of one text that still counts as the
# same answer (batching on CPU moves the last digits of a float32).
EMBEDDING_TOLERANCE = 1e-3


@dataclass(frozen=True)
class SmokeSettings:
    """The checklist's numbers; the defaults are the seed's."""

    stable_runs: int = 10
    concurrent_requests: int = 5
    first_inference_limit_s: float = 300.0
    request_timeout_s: float = 600.0
    max_tokens: int = 32
    prompt: str = "In one short sentence: what is the capital of France?"
    # Tokens beyond the largest context of the profile in the over-long input: large enough
    # that no estimator rounding or fallback to a longer-context model can make it fit.
    context_overshoot_tokens: int = 1024


@dataclass
class CheckResult:
    # True = passed, False = failed, None = does not apply / not run.
    ok: Optional[bool]
    detail: str = ""


@dataclass
class ModelReport:
    alias: str
    role: str
    first_inference_s: Optional[float] = None
    checks: dict[str, CheckResult] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks.values()) and \
            any(c.ok for c in self.checks.values())


def _served_instead(result: CallResult, alias: str) -> Optional[str]:
    selected = result.headers.get("x-vsr-selected-model")
    return selected if selected and selected != alias else None


def _answer_problem(result: CallResult, alias: str) -> Optional[str]:
    if not result.ok:
        return result.error_message
    if not result.content.strip() and not result.message.get("tool_calls"):
        return "empty answer"
    other = _served_instead(result, alias)
    if other:
        return f"answered by {other} (fallback: {result.headers.get('x-vsr-fallback', '?')})"
    return None


class SmokeRunner:
    def __init__(self, cfg: HorizonConfig, client: httpx.AsyncClient, settings: SmokeSettings):
        self.cfg = cfg
        self.client = client
        self.settings = settings

    def _chat(self, alias: str, content: str, **extra) -> dict:
        return {"model": alias, "messages": [{"role": "user", "content": content}],
                "max_tokens": self.settings.max_tokens, **extra}

    def overlong_tokens(self) -> int:
        """Estimated tokens of the over-long input: past every chat model's context."""
        limits = [self.cfg.context_limit(m.alias) for m in self.cfg.models
                  if m.role != "embedding"]
        return max(limits) + self.settings.context_overshoot_tokens

    async def check_model(self, model: ModelSettings) -> ModelReport:
        report = ModelReport(model.alias, model.role)
        if model.role == "embedding":
            await self._check_embedding(model, report)
            return report
        await self._check_answers(model.alias, report)
        if not report.checks["answers"].ok:
            for name in CHECKS[1:]:
                report.checks[name] = CheckResult(None, "not run: the model does not answer")
            return report
        report.checks["stable"] = await self._check_stable(model.alias)
        report.checks["context"] = await self._check_context(
            "/v1/chat/completions", lambda text: self._chat(model.alias, text), self.overlong_tokens())
        report.checks["concurrent"] = await self._check_concurrent(model.alias)
        return report

    async def _embed(self, alias: str, text: str) -> tuple[CallResult, Optional[list[float]]]:
        result = await post_json(self.client, "/v1/embeddings", {"model": alias, "input": [text]})
        data = result.body.get("data") if result.ok and isinstance(result.body, dict) else None
        vector = data[0].get("embedding") if data and isinstance(data[0], dict) else None
        return result, vector if isinstance(vector, list) and vector else None

    async def _check_embedding(self, model: ModelSettings, report: ModelReport) -> None:
        alias = model.alias
        result, vector = await self._embed(alias, "smoke test")
        report.first_inference_s = result.elapsed_s
        if not result.ok:
            report.checks["answers"] = CheckResult(False, result.error_message)
        elif vector is None:
            report.checks["answers"] = CheckResult(False, "no embedding in the response")
        else:
            report.checks["answers"] = self._timed(result.elapsed_s, f"{len(vector)}-d vector")
        if not report.checks["answers"].ok:
            for name in CHECKS[1:]:
                report.checks[name] = CheckResult(None, "not run: the model does not answer")
            return
        assert vector is not None
        report.checks["stable"] = await self._check_stable_embedding(alias, vector)
        report.checks["context"] = CheckResult(None, "n/a: the profile sets no embedding length")
        if model.embedding is not None:
            # An input past what the model embeds in one pass: a 400, not a silently cut vector.
            report.checks["context"] = await self._check_context(
                "/v1/embeddings", lambda text: {"model": alias, "input": text},
                model.embedding.max_length + self.settings.context_overshoot_tokens)
        report.checks["concurrent"] = await self._check_concurrent_embeddings(alias, len(vector))

    async def _check_stable_embedding(self, alias: str, first: list[float]) -> CheckResult:
        runs = self.settings.stable_runs
        worst = 0.0
        for i in range(runs):  # consecutive, as for chat models
            result, vector = await self._embed(alias, "smoke test")
            if vector is None:
                return CheckResult(False, f"run {i + 1}/{runs}: {result.error_message if not result.ok else 'no embedding'}")
            if len(vector) != len(first):
                return CheckResult(False, f"run {i + 1}/{runs}: {len(vector)}-d vector, {len(first)}-d before")
            worst = max(worst, max(abs(a - b) for a, b in zip(first, vector)))
        # A batch's padding can move the last float digits; a different vector moves far more.
        if worst > EMBEDDING_TOLERANCE:
            return CheckResult(False, f"the same text's vector moved by up to {worst:.2g} over {runs} runs")
        return CheckResult(True, f"{runs} the same (within {worst:.1g})")

    async def _check_concurrent_embeddings(self, alias: str, size: int) -> CheckResult:
        n = self.settings.concurrent_requests
        results = await asyncio.gather(*(self._embed(alias, f"smoke test {i + 1} of {n}") for i in range(n)))
        problems = [f"#{i + 1}: {r.error_message if not r.ok else 'no embedding of ' + str(size) + ' floats'}"
                    for i, (r, v) in enumerate(results) if v is None or len(v) != size]
        if problems:
            return CheckResult(False, f"{len(problems)}/{n} failed: " + "; ".join(problems[:3]))
        return CheckResult(True, f"{n}/{n} ok, slowest {max(r.elapsed_s for r, _ in results):.2f} s")

    def _timed(self, elapsed_s: float, detail: str) -> CheckResult:
        limit = self.settings.first_inference_limit_s
        if elapsed_s > limit:
            return CheckResult(False, f"first inference took {elapsed_s:.1f} s (limit {limit:g} s)")
        return CheckResult(True, detail)

    async def _check_answers(self, alias: str, report: ModelReport) -> None:
        result = await post_json(self.client, "/v1/chat/completions", self._chat(alias, self.settings.prompt))
        report.first_inference_s = result.elapsed_s
        problem = _answer_problem(result, alias)
        report.checks["answers"] = CheckResult(False, problem) if problem else \
            self._timed(result.elapsed_s, f"{len(result.content)} chars")

    async def _check_stable(self, alias: str) -> CheckResult:
        runs = self.settings.stable_runs
        outputs: list[str] = []
        for i in range(runs):  # consecutive on purpose: the seed's check is run after run
            result = await post_json(self.client, "/v1/chat/completions",
                                     self._chat(alias, self.settings.prompt, temperature=0, seed=0))
            problem = _answer_problem(result, alias)
            if problem:
                return CheckResult(False, f"run {i + 1}/{runs}: {problem}")
            outputs.append(result.content)
        distinct = len(set(outputs))
        if distinct != 1:
            return CheckResult(False, f"{distinct} different outputs in {runs} temperature-0 runs")
        return CheckResult(True, f"{runs} identical")

    async def _check_context(self, path: str, body: Callable[[str], dict], tokens: int) -> CheckResult:
        """``body(text)`` sent to ``path`` with a text of at least ``tokens`` tokens must be the
        400 ``context_length_exceeded``."""
        # "a " is one token for real tokenizers and half a token for the estimator, so 4 chars
        # per wanted token overshoots both.
        result = await post_json(self.client, path, body("a " * (2 * tokens)))
        if result.status == 400 and result.error_code == "context_length_exceeded":
            return CheckResult(True, f"400 for ~{tokens} tokens")
        got = result.error_message if not result.ok else "HTTP 200 (the request was accepted)"
        code = f" code={result.error_code}" if result.error_code else ""
        return CheckResult(False, f"~{tokens} tokens: expected 400 context_length_exceeded, got {got}{code}")

    async def _check_concurrent(self, alias: str) -> CheckResult:
        n = self.settings.concurrent_requests
        # Distinct prompts, so no layer can answer all five from one computation.
        results = await asyncio.gather(*(
            post_json(self.client, "/v1/chat/completions",
                      self._chat(alias, f"{self.settings.prompt} (request {i + 1} of {n})"))
            for i in range(n)))
        problems = [f"#{i + 1}: {p}" for i, r in enumerate(results) if (p := _answer_problem(r, alias))]
        if problems:
            return CheckResult(False, f"{len(problems)}/{n} failed: " + "; ".join(problems[:3]))
        slowest = max(r.elapsed_s for r in results)
        return CheckResult(True, f"{n}/{n} ok, slowest {slowest:.2f} s")


def models_to_check(cfg: HorizonConfig, aliases: Optional[list[str]]) -> list[ModelSettings]:
    if aliases:
        unknown = [a for a in aliases if a not in cfg.aliases]
        if unknown:
            raise ToolUsageError(f"unknown model(s) {unknown}; the profile serves {cfg.aliases}")
        chosen = [cfg.model(a) for a in aliases]
    else:
        chosen = list(cfg.models)
    return sorted(chosen, key=lambda m: _ROLE_ORDER.get(m.role, len(_ROLE_ORDER)))


async def run_smoke(cfg: HorizonConfig, url: str = DEFAULT_URL, *, aliases: Optional[list[str]] = None,
                    settings: SmokeSettings = SmokeSettings(), api_key: Optional[str] = None,
                    transport: Optional[httpx.AsyncBaseTransport] = None) -> list[ModelReport]:
    base = loopback_base_url(url)
    models = models_to_check(cfg, aliases)
    async with make_client(base, api_key=api_key, timeout_s=settings.request_timeout_s,
                           max_connections=max(4, settings.concurrent_requests),
                           transport=transport) as client:
        await ensure_listening(client)
        runner = SmokeRunner(cfg, client, settings)
        return [await runner.check_model(m) for m in models]


def _cell(check: Optional[CheckResult]) -> str:
    if check is None or check.ok is None:
        return "n/a" if check is None or check.detail.startswith("n/a") else "not run"
    return "ok" if check.ok else "FAIL"


def render_report(reports: list[ModelReport], settings: SmokeSettings) -> str:
    headers = ["model", "role", "answers", "first inference", f"stable x{settings.stable_runs}",
               "context 400", f"{settings.concurrent_requests} concurrent", "result"]
    rows = []
    for r in reports:
        first = f"{r.first_inference_s:.2f} s" if r.first_inference_s is not None else "-"
        rows.append([r.alias, r.role, _cell(r.checks.get("answers")), first,
                     *(_cell(r.checks.get(name)) for name in CHECKS[1:]),
                     "PASS" if r.ok else "FAIL"])
    lines = [markdown_table(headers, rows)]
    failures = [(r.alias, name, c.detail) for r in reports for name, c in r.checks.items() if c.ok is False]
    if failures:
        lines += ["", "Failures:"] + [f"- {alias} / {name}: {detail}" for alias, name, detail in failures]
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def register(parser: argparse.ArgumentParser) -> None:
    defaults = SmokeSettings()
    parser.description = "Run the bring-up smoke checklist against a running endpoint (loopback only)."
    parser.add_argument("--config", default=None,
                        help="the profile the endpoint runs (YAML; default: the one `horizon serve` runs)")
    parser.add_argument("--model", action="append", dest="models", metavar="ALIAS",
                        help="check only this model (repeatable); default: every model")
    parser.add_argument("--url", default=None,
                        help=f"endpoint base URL (default: `horizon serve`'s, else {DEFAULT_URL})")
    parser.add_argument("--api-key", default=os.environ.get("HORIZON_API_KEY"),
                        help="Bearer key when auth is enabled (default: $HORIZON_API_KEY)")
    parser.add_argument("--stable-runs", type=whole_number(1), default=defaults.stable_runs)
    parser.add_argument("--concurrency", type=whole_number(1), default=defaults.concurrent_requests,
                        help="requests sent at once by the concurrency check")
    parser.add_argument("--first-inference-limit", type=positive_number, default=defaults.first_inference_limit_s,
                        metavar="SECONDS")
    parser.add_argument("--timeout", type=positive_number, default=defaults.request_timeout_s, metavar="SECONDS",
                        help="per-request client timeout")
    parser.add_argument("--json", dest="json_out", metavar="FILE", help="also write the results as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = SmokeSettings(stable_runs=args.stable_runs, concurrent_requests=args.concurrency,
                             first_inference_limit_s=args.first_inference_limit,
                             request_timeout_s=args.timeout)
    running = lc.ServeState.load()
    config = args.config or (running.config if running else None)
    url = args.url or (running.base_url if running else DEFAULT_URL)
    if config is None:
        print("horizon smoke: --config is required when no `horizon serve` is running "
              "(the profile the endpoint runs)", file=sys.stderr)
        return 2
    try:
        cfg = load_config(config)
        reports = asyncio.run(run_smoke(cfg, url, aliases=args.models, settings=settings,
                                        api_key=args.api_key))
    except (ToolUsageError, ConfigError, OSError) as exc:
        print(f"horizon smoke: {exc}", file=sys.stderr)
        return 2
    print(render_report(reports, settings))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(r) | {"ok": r.ok} for r in reports], indent=2))
    passed = all(r.ok for r in reports)
    print(f"\nsmoke: {'PASS' if passed else 'FAIL'} ({sum(r.ok for r in reports)}/{len(reports)} models passed)")
    return 0 if passed else 1
