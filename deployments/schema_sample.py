"""A JSON value that validates against a JSON Schema, for the simulated engine.

The simulated engine answers ``response_format`` json_schema and tool calls the way a
grammar-constrained engine would: with JSON that conforms to the schema. This builds one such
value, deterministically for a given seed, covering what OpenAI clients send (pydantic and
zod schemas, OpenAI strict function schemas): ``$ref`` / ``$defs``, ``allOf`` / ``anyOf`` /
``oneOf``, ``enum`` / ``const``, typed objects, arrays, strings (lengths, common formats),
numbers (bounds, ``multipleOf``), booleans and null. ``pattern`` is not inverted: a string
under a pattern is taken from the schema's ``examples`` or ``default`` when it has one.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any, Optional

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()

_FORMATS = {
    "date-time": "2024-01-02T03:04:05Z",
    "date": "2024-01-02",
    "time": "03:04:05Z",
    "email": "sim@example.com",
    "uri": "https://example.com/sim",
    "url": "https://example.com/sim",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
}
_MAX_DEPTH = 12


class SchemaSampler:
    def __init__(self, root: Any, seed: int = 0, words: Optional[list[str]] = None):
        self.root = root if isinstance(root, dict) else {}
        self.rng = random.Random(seed)
        self.words = [w for w in (words or []) if w] or list(WORDS)

    def value(self) -> Any:
        return self._sample(self.root, 0)

    # ------------------------------------------------------------------ helpers
    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return {}
        node: Any = self.root
        for part in ref.lstrip("#").strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node

    def _merge_all_of(self, schema: dict[str, Any]) -> dict[str, Any]:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = self._deref(part)
            for key, value in part.items():
                if key == "properties":
                    merged.setdefault("properties", {}).update(value)
                elif key == "required":
                    merged["required"] = sorted(set(merged.get("required", [])) | set(value))
                else:
                    merged.setdefault(key, value)
        return merged

    def _deref(self, schema: Any) -> Any:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < _MAX_DEPTH:
            target = self._resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, dict) else rest
            seen += 1
        return schema

    def _word(self) -> str:
        return self.words[self.rng.randrange(len(self.words))]

    # ------------------------------------------------------------------ sampling
    def _sample(self, schema: Any, depth: int) -> Any:
        schema = self._deref(schema)
        if schema is True or schema is None or schema == {}:
            return self._word() if depth else {}
        if schema is False or not isinstance(schema, dict):
            return None
        if "allOf" in schema:
            return self._sample(self._merge_all_of(schema), depth)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if schema.get("enum"):
            return copy.deepcopy(schema["enum"][0])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                options = [self._deref(o) for o in schema[key]]
                # Prefer a branch that is not null: an absent value says little in a load test.
                chosen = next((o for o in options if not (isinstance(o, dict) and o.get("type") == "null")),
                              options[0])
                base = {k: v for k, v in schema.items() if k != key}
                return self._sample({**base, **chosen} if isinstance(chosen, dict) else chosen, depth)
        for key in ("examples", "default"):
            if key in schema and schema[key] is not None:
                example = schema[key][0] if key == "examples" and isinstance(schema[key], list) \
                    and schema[key] else schema[key]
                if key == "default" or example is not None:
                    return copy.deepcopy(example)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                kind = "string"
        if depth >= _MAX_DEPTH:
            return {"object": {}, "array": [], "string": "", "number": 0, "integer": 0,
                    "boolean": False}.get(kind)
        return getattr(self, f"_{kind}", self._null)(schema, depth)

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            out[name] = self._sample(sub, depth + 1)
        for name in schema.get("required") or []:
            if name not in out:
                extra = schema.get("additionalProperties")
                out[name] = self._sample(extra if isinstance(extra, dict) else True, depth + 1)
        want = schema.get("minProperties") or 0
        extra = schema.get("additionalProperties", True)
        while len(out) < want and extra is not False:
            out[f"{self._word()}_{len(out)}"] = self._sample(extra if isinstance(extra, dict) else True,
                                                            depth + 1)
        return out

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        low = schema.get("minItems", 0)
        high = schema.get("maxItems")
        count = max(low, len(prefix), 1)
        if high is not None:
            count = min(count, high)
        out = [self._sample(prefix[i], depth + 1) if i < len(prefix) else
               self._sample(items if items is not False else {}, depth + 1) for i in range(count)]
        if schema.get("uniqueItems"):
            item = self._deref(items) if isinstance(items, dict) else {}
            step = item.get("multipleOf") or 1 if isinstance(item, dict) else 1
            for i, value in enumerate(out):
                if value in out[:i] and isinstance(value, str):
                    out[i] = f"{value}{i}"
                elif value in out[:i] and isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[i] = value + step * i
        return out

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        fmt = schema.get("format")
        text = _FORMATS.get(fmt) if fmt else None
        if text is None:
            text = " ".join(self._word() for _ in range(2 if depth else 3))
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        while len(text) < low:
            text += " " + self._word()
        if high is not None:
            text = text[:high]
        return text

    def _number(self, schema: dict[str, Any], depth: int) -> float:
        return self._numeric(schema, integer=False)

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        return int(self._numeric(schema, integer=True))

    def _numeric(self, schema: dict[str, Any], integer: bool) -> float:
        low = schema.get("minimum")
        high = schema.get("maximum")
        step = 1 if integer else 0.5
        if schema.get("exclusiveMinimum") is not None and not isinstance(schema["exclusiveMinimum"], bool):
            low = schema["exclusiveMinimum"] + step
        elif schema.get("exclusiveMinimum") is True and low is not None:
            low = low + step
        if schema.get("exclusiveMaximum") is not None and not isinstance(schema["exclusiveMaximum"], bool):
            high = schema["exclusiveMaximum"] - step
        elif schema.get("exclusiveMaximum") is True and high is not None:
            high = high - step
        value: float = 1 if low is None else low
        if high is not None and value > high:
            value = high
        if integer:
            value = math.ceil(value) if low is not None else math.floor(value)
        multiple = schema.get("multipleOf")
        if multiple:
            value = math.ceil(value / multiple) * multiple
            if high is not None and value > high:
                value -= multiple
            if integer:
                value = int(value)
        return value

    def _boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return True

    def _null(self, schema: dict[str, Any], depth: int) -> None:
        return None


def sample(schema: Any, seed: int = 0, words: Optional[list[str]] = None) -> Any:
    """A value valid against ``schema`` (deterministic for ``seed`` and ``words``)."""
    return SchemaSampler(schema, seed, words).value()
