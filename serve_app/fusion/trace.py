"""What operators see of a Fusion run: the body's ``fusion`` object and ``x-vsr-fusion-*`` headers.

The looper always builds the full trace. Visibility flags only filter this view:
``include_analysis`` hides the judge analysis, ``include_intermediate_responses`` hides the
panel answers (their prompts and answers may be sensitive). The body carries the object when
either flag is on, a member failed, or grounding left evidence (the vLLM-SR predicate).
"""

from __future__ import annotations

import re
from typing import Any

HEADER_PREFIX = "x-vsr-fusion-"
_UNSAFE_HEADER_CHARS = re.compile(r"[^\x20-\x7e]")


def body_trace(trace: dict[str, Any], include_analysis: bool,
               include_intermediate_responses: bool) -> dict[str, Any] | None:
    """The response body's ``fusion`` object, or None when nothing may be shown."""
    has_failures = bool(trace.get("failed_models"))
    has_grounding = bool(trace.get("grounding"))
    if not (include_analysis or include_intermediate_responses or has_failures or has_grounding):
        return None
    view = dict(trace)
    if not include_analysis:
        view.pop("analysis", None)
    if not include_intermediate_responses:
        view.pop("responses", None)
        # Failures stay visible, but without any partial answer text.
        view["failed_models"] = [{k: v for k, v in f.items() if k != "content"}
                                 for f in trace.get("failed_models", [])]
    return view


def _header_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    elif isinstance(value, float):
        value = f"{value:.1f}"
    return _UNSAFE_HEADER_CHARS.sub("?", str(value))


def trace_headers(trace: dict[str, Any]) -> dict[str, str]:
    """Key facts of the run, safe for HTTP headers (printable ASCII only)."""
    facts = {
        "decision": trace.get("decision"),
        "judge": trace.get("judge_model"),
        "panel": trace.get("analysis_models", []),
        "mode": trace.get("analysis_mode"),
        "prompt-version": trace.get("prompt_version"),
        "usable": trace.get("usable_responses"),
        "failed": [f["model"] for f in trace.get("failed_models", [])],
        "iterations": trace.get("iterations"),
        "ms": (trace.get("timings_ms") or {}).get("total"),
    }
    return {HEADER_PREFIX + key: _header_value(value) for key, value in facts.items()
            if value is not None}
