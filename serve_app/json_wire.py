"""JSON on the wire: request bodies in, answers and stream chunks out, written by orjson.

Every request is parsed once and every answer (and every chunk of a stream the gateway builds)
written once, so this is per-request work on the ingress. orjson does it several times faster
than the standard library: about 2 µs instead of 6 for a short chat answer, 2 instead of 20 for
a 6-KB one, and 0.1 ms instead of 3 for 16 embedding vectors, whose floats are the slowest thing
``json`` writes (``loadtests/bench_json_wire.py``).

Output is compact UTF-8, the shape Starlette's ``JSONResponse`` writes. Where the two libraries
differ the standard library's behaviour is kept, so nothing a client sends or receives changes:
a value orjson refuses to write (an integer over 64 bits) or to read (``NaN``, ``Infinity``)
goes to ``json`` instead, and keys that are not strings become strings. Two differences stay:
a float that is not a number is written as ``null``, where ``json`` would fail the whole
answer; and an unpaired surrogate escape (``"\\ud800"`` alone) is refused, as orjson refuses
it, where ``json`` would read it. Such a string is not text: UTF-8 cannot carry it and vLLM's
tokenizer fails on it, a failure that counted against the model's breaker.
"""

from __future__ import annotations

import json
from typing import Any, Union

import orjson
from starlette.responses import JSONResponse

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

JSONDecodeError = json.JSONDecodeError


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        # What orjson refuses and json writes (an int over 64 bits); anything neither can
        # write still raises, from json, as a TypeError or ValueError.
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


def loads(raw: Union[bytes, str]) -> Any:
    """The value of a JSON text; :data:`JSONDecodeError` (or ``UnicodeDecodeError`` for bytes
    that are not UTF-8) when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as orjson_error:
        # What json reads and orjson does not (NaN, Infinity); a text neither reads raises
        # here, with json's message.
        try:
            value = json.loads(raw)
        except RecursionError:
            # Nested deeper than orjson's 1,024 levels and json's recursion limit: orjson's
            # error says so ("depth limit exceeded"), and is a JSONDecodeError.
            raise orjson_error from None
        try:
            # An unpaired surrogate escape, which json reads and orjson does not, cannot be
            # written as UTF-8; orjson's error names it and where it is.
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise orjson_error from None
        return value


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether the parsed JSON ``value`` has objects or arrays nested more than ``limit`` deep
    (``{}`` and ``[]`` are one level; a scalar is none). One level at a time, without
    recursion, so any depth is safe; it visits each object and array once (≈ 1 µs for a
    short chat body, 60 µs for 2,048 embedding inputs). Parsed JSON holds plain dicts and
    lists, hence the exact type checks."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for item in level:
            for child in (item.values() if type(item) is dict else item):
                if type(child) is dict or type(child) is list:
                    below.append(child)
        level = below
    return False


class JSONAnswer(JSONResponse):
    """Starlette's ``JSONResponse`` (same media type, status and headers) written by orjson."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
