"""Fakes for the output-contract tests: chat completions, a scripted retry, a tiny profile."""

from __future__ import annotations

from typing import Any, Optional

from serve_app.config import parse_config
from serve_app.errors import HorizonError


def reply(text: Optional[str], *, model: str = "fake", finish: str = "stop",
          usage: Optional[dict] = None, tool_calls: Optional[list] = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    out = {"id": "cmpl-1", "object": "chat.completion", "model": model,
           "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage
    return out


class ScriptedRetry:
    """The ``retry`` callable: records each corrective request and answers from a script
    (a response dict, or a HorizonError to raise)."""

    def __init__(self, *answers: Any):
        self.answers = list(answers)
        self.requests: list[dict] = []

    async def __call__(self, request: dict) -> dict:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, HorizonError):
            raise answer
        return answer


CHAINS = {"reasoning": ["r1-distill", "k2", "qwen-72b"], "code": ["coder", "k2"],
          "chat": ["qwen-72b", "k2"]}


def profile(*, context_fallback: bool = True, models: Optional[list[dict]] = None,
            unavailable: Optional[list[dict]] = None):
    """Four models with distinct context lengths and the SPEC §6 chains."""
    models = models or [
        {"alias": "k2", "role": "coordinator", "max_model_len": 1000},
        {"alias": "qwen-72b", "role": "chat", "max_model_len": 4000},
        {"alias": "r1-distill", "role": "reasoning", "max_model_len": 2000},
        {"alias": "coder", "role": "code", "max_model_len": 2000},
    ]
    doc_models = []
    for m in models:
        entry = {"alias": m["alias"], "role": m["role"], "backend": "simulated",
                 "engine": {"model": f"fake/{m['alias']}", "max_model_len": m["max_model_len"]}}
        for key in ("sampling", "shares_engine_with"):
            if key in m:
                entry[key] = m[key]
        doc_models.append(entry)
    known = {m["alias"] for m in models} | {u["alias"] for u in unavailable or []}
    chains = {task: [a for a in chain if a in known] for task, chain in CHAINS.items()}
    return parse_config({
        "profile": "outputs-test",
        "models": doc_models,
        "unavailable_models": unavailable or [],
        "routing": {"default_decision": "chat",
                    "decisions": [{"name": "chat", "modelRefs": [{"model": models[0]["alias"]}]}]},
        "resilience": {
            "context_fallback": context_fallback,
            "fallback_chains": {task: chain for task, chain in chains.items() if chain},
        },
    })
