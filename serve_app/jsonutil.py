"""The one ``extract_json``: pull a JSON object out of model text and repair light damage.

Used by the k2 classifier, the Fusion judge analysis and structured outputs alike. Steps:
strip markdown fences, take the outermost braces, then try the text as is and with light
repairs (trailing commas, single quotes, unquoted keys, Python literals).
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_UNQUOTED_KEY = re.compile(r'([{,]\s*)([A-Za-z_][A-Za-z0-9_\-]*)(\s*:)')
_SINGLE_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_PY_LITERALS = {r"\bTrue\b": "true", r"\bFalse\b": "false", r"\bNone\b": "null"}


class JSONExtractionError(ValueError):
    def __init__(self, message: str, raw: str):
        super().__init__(message)
        self.raw = raw


def _outermost(text: str, open_ch: str = "{", close_ch: str = "}") -> Optional[str]:
    start = text.find(open_ch)
    end = text.rfind(close_ch)
    if start == -1 or end <= start:
        return None
    return text[start:end + 1]


def _repairs(candidate: str):
    yield candidate
    fixed = _TRAILING_COMMA.sub(r"\1", candidate)
    yield fixed
    fixed = _SINGLE_QUOTED.sub(lambda m: json.dumps(m.group(1).replace("\\'", "'")), fixed)
    yield fixed
    fixed = _UNQUOTED_KEY.sub(r'\1"\2"\3', fixed)
    yield fixed
    for pattern, repl in _PY_LITERALS.items():
        fixed = re.sub(pattern, repl, fixed)
    yield fixed
    # A truncated object: close the open string and brackets.
    if fixed.count('"') % 2 == 1:
        fixed += '"'
    fixed += "]" * max(0, fixed.count("[") - fixed.count("]"))
    fixed += "}" * max(0, fixed.count("{") - fixed.count("}"))
    yield _TRAILING_COMMA.sub(r"\1", fixed)


def extract_json(text: str, *, expect: type = dict) -> Any:
    """Return the JSON value in ``text`` (an object by default) or raise JSONExtractionError."""
    if not isinstance(text, str) or not text.strip():
        raise JSONExtractionError("empty output", text or "")
    candidates: list[str] = []
    fence = _FENCE.search(text)
    if fence:
        candidates.append(fence.group(1).strip())
    elif text.lstrip().startswith("```"):
        # An opening fence whose closing fence was cut off (truncated output).
        candidates.append(text.lstrip().split("\n", 1)[-1].strip())
    candidates.append(text.strip())
    if expect is dict:
        for base in list(candidates):
            inner = _outermost(base)
            if inner is None and base.lstrip().startswith("{"):
                inner = base[base.find("{"):]  # truncated: no closing brace at all
            if inner:
                candidates.append(inner)
    elif expect is list:
        for base in list(candidates):
            inner = _outermost(base, "[", "]")
            if inner:
                candidates.append(inner)
    for candidate in candidates:
        for attempt in _repairs(candidate):
            try:
                value = json.loads(attempt)
            except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
                continue
            if expect is object or isinstance(value, expect):
                return value
    raise JSONExtractionError("no parseable JSON found", text)
