"""Load a profile YAML into a validated :class:`HorizonConfig`.

A profile file is a Ray Serve config (``applications[0].args`` hold the Horizon settings) so
the same file feeds ``serve run`` and every ``horizon`` command. A bare Horizon mapping (no
``applications`` key) is accepted too, which keeps unit-test fixtures short.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from .base import PathError
from .schema import HorizonConfig

# Tag names pydantic inserts in error locations for union members; they are not config keys.
_UNION_TAGS = {"RuleNode", "Condition"}


class ConfigError(ValueError):
    """An invalid profile. ``errors`` lists (path, message); ``str()`` is one line per error."""

    # What the file is, in the message's first line (a subclass names another kind of file).
    what = "configuration"

    def __init__(self, source: str, errors: list[tuple[str, str]]):
        self.source = source
        self.errors = errors
        lines = [f"{path or '<root>'}: {msg}" for path, msg in errors]
        super().__init__(f"invalid {self.what} {source}:\n  " + "\n  ".join(lines))

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.errors]


def format_loc(loc: tuple[Any, ...], prefix: str = "") -> str:
    """('models', 2, 'engine', 'tensor_parallel_size') -> 'models[2].engine.tensor_parallel_size'."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part not in _UNION_TAGS and not part.startswith("function-"):
            out += f".{part}" if out else part
    return out


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """(key path, message) per error of a pydantic validation, keys written as in the YAML."""
    errors: list[tuple[str, str]] = []
    for err in exc.errors():
        cause = (err.get("ctx") or {}).get("error")
        base = format_loc(tuple(err.get("loc", ())))
        if isinstance(cause, PathError):
            path = f"{base}.{cause.path}" if base else cause.path
            errors.append((path, cause.message))
            continue
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key"
        errors.append((base, msg.removeprefix("Value error, ")))
    # A union (rule node vs condition) reports each member's failure; keep one per path.
    seen: dict[str, str] = {}
    for path, msg in errors:
        seen.setdefault(path, msg)
    return list(seen.items())


def horizon_args(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Horizon settings inside a Ray Serve config document (or the document itself)."""
    if "applications" in document:
        apps = document["applications"] or []
        if len(apps) != 1 or not isinstance(apps[0], Mapping):
            raise ConfigError("<serve config>", [("applications", "expected exactly one application")])
        return apps[0].get("args") or {}
    return document


def parse_config(document: Mapping[str, Any], source: str = "<dict>") -> HorizonConfig:
    if not isinstance(document, Mapping):
        raise ConfigError(source, [("", "expected a mapping at the top level")])
    try:
        return HorizonConfig.model_validate(dict(horizon_args(document)))
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc)) from None


def read_document(path: str | os.PathLike, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """The YAML document at ``path`` ({} when empty); a file that cannot be read as YAML text
    raises ``error`` naming it, never a traceback."""
    p = Path(path)
    try:
        with p.open("r", encoding="utf-8") as fh:
            document = yaml.safe_load(fh)
    except FileNotFoundError:
        raise error(str(p), [("", "file not found")]) from None
    except OSError as exc:  # a directory, no permission
        raise error(str(p), [("", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise error(str(p), [("", "not UTF-8 text")]) from None
    except yaml.YAMLError as exc:
        raise error(str(p), [("", f"YAML syntax error: {exc}")]) from None
    return document or {}


def load_config(path: str | os.PathLike) -> HorizonConfig:
    """What the profile file serves: ``args`` with the ingress's live routing settings, if any."""
    from .live import effective_config  # live builds on this module

    return effective_config(read_document(path), source=str(path))
