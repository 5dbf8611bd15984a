"""Does the Fusion judge's JSON analysis close within its token room? Per question and variant.

A small judge decoding greedily can repeat a token pair inside its schema-constrained JSON
strings until the analysis call's token limit (384), so the analysis is cut and the synthesis
works from the panel alone (docs/fusion.md). This sends real Fusion requests to a running
endpoint of ``configs/local.yaml`` (``horizon serve configs/local.yaml``), each question of
``--questions`` once per variant, and reads the trace: whether the analysis closed (not
``cut``, all five keys), its tokens and its seconds. The variants are the temperature (0 and
the profile's 0.3) crossed with the analysis's frequency penalty (the request's plugin sets 0,
i.e. none; or the judge model's ``fusion_judge`` default, the profile's 0.5). The variants run
interleaved per question in a rotating order; the panel is the request-scoped three of the
README's example, answers capped at ``--max-tokens``.

  .venv/bin/python loadtests/fusion_analysis_closes.py [--url http://127.0.0.1:8000] \\
      [--questions loadtests/data/fusion_questions.jsonl] [--out loadtests/results/....json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import fmt, machine, markdown_table, rotated, stats  # noqa: E402
from serve_app.fusion.judge import ANALYSIS_KEYS  # noqa: E402
PANEL = ["qwen-72b", "r1-distill", "coder"]
# (label, temperature, the plugin's analysis_frequency_penalty: None = the judge model's default)
VARIANTS = [("t0, no penalty", 0.0, 0.0), ("t0, judge default", 0.0, None),
            ("t0.3, no penalty", 0.3, 0.0), ("t0.3, judge default", 0.3, None)]


def fusion_request(url: str, question: str, temperature: float, penalty: float | None,
                   max_tokens: int) -> dict:
    plugin: dict = {"id": "fusion", "model": "k2", "analysis_models": PANEL}
    if penalty is not None:
        plugin["analysis_frequency_penalty"] = penalty
    started = time.perf_counter()
    r = httpx.post(f"{url}/v1/chat/completions", timeout=600, json={
        "model": "vllm-sr/fusion", "temperature": temperature, "max_tokens": max_tokens,
        "seed": 0, "plugins": [plugin], "messages": [{"role": "user", "content": question}]})
    r.raise_for_status()
    trace = r.json()["fusion"]
    analysis = trace["analysis"]
    call = next(c for c in trace["judge_calls"] if c["stage"] == "analysis")
    return {"closed": not analysis.get("cut") and not analysis.get("parse_failed")
                      and set(ANALYSIS_KEYS) <= set(analysis),
            "cut": bool(analysis.get("cut")),
            "tokens": (call.get("usage") or {}).get("completion_tokens"),
            "analysis_s": call["latency_ms"] / 1000, "sampling": call.get("sampling"),
            "total_s": time.perf_counter() - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--questions", default=str(ROOT / "loadtests" / "data" / "fusion_questions.jsonl"))
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if urlparse(args.url).hostname not in ("127.0.0.1", "localhost", "::1"):
        parser.error("--url must be a loopback address")
    questions = [json.loads(line)["question"] for line in
                 Path(args.questions).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows: list[dict] = []
    for i, question in enumerate(questions):
        for label, temperature, penalty in rotated(VARIANTS, i):
            result = fusion_request(args.url, question, temperature, penalty, args.max_tokens)
            rows.append({"question": question, "variant": label, **result})
            print(f"{label:20s} closed={result['closed']!s:5s} tokens={result['tokens']:>4} "
                  f"{result['analysis_s']:5.1f} s  {question[:50]}", flush=True)
    table = []
    for label, _, _ in VARIANTS:
        mine = [r for r in rows if r["variant"] == label]
        table.append([label, f"{sum(r['closed'] for r in mine)} of {len(mine)}",
                      f"{sum(r['cut'] for r in mine)}", fmt(stats([r["tokens"] for r in mine]), 0),
                      fmt(stats([r["analysis_s"] for r in mine]), 1)])
    print(markdown_table(["variant", "analysis closed", "cut", "analysis tokens", "analysis s"], table))
    if args.out:
        Path(args.out).write_text(json.dumps({
            "command": " ".join(sys.argv), "machine": machine(), "questions": args.questions,
            "variants": [v[0] for v in VARIANTS], "rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
