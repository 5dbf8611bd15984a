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
        if not isinstance(apps, list) or len(apps) != 1 or not isinstance(apps[0], Mapping):
            raise ConfigError("<serve config>", [("applications", "expected exactly one application")])
        args = apps[0].get("args") or {}
        if not isinstance(args, Mapping):
            raise ConfigError("<serve config>", [("applications[0].args", "expected a mapping of Horizon settings")])
        return args
    return document


# Where Serve listens when a profile's Serve config is silent.
DEFAULT_HOST, DEFAULT_PORT, DEFAULT_ROUTE_PREFIX = "127.0.0.1", 8000, "/"


def serve_http(document: Mapping[str, Any]) -> tuple[str, int, str]:
    """Host, port and route prefix a profile's Serve config document serves on, Serve's defaults
    where it is silent. ConfigError naming the key when Serve could not listen there: its own
    schema lets a port of 70000 and a prefix without its leading slash through to a failed bind
    or a URL with the prefix glued to the port."""
    horizon_args(document)  # exactly one application
    http = document.get("http_options") or {}
    if not isinstance(http, Mapping):
        raise ConfigError("<serve config>", [("http_options", "expected a mapping (host, port)")])
    host, port = http.get("host", DEFAULT_HOST), http.get("port", DEFAULT_PORT)
    apps = document.get("applications") or [{}]
    prefix = apps[0].get("route_prefix", DEFAULT_ROUTE_PREFIX) or DEFAULT_ROUTE_PREFIX
    problems = []
    if not isinstance(host, str) or not host:
        problems.append(("http_options.host", "expected a host name or address"))
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(("http_options.port", f"expected a port from 1 to 65535, got {port!r}"))
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        problems.append(("applications[0].route_prefix", f"expected a path starting with '/', got {prefix!r}"))
    if problems:
        raise ConfigError("<serve config>", problems)
    return host, port, prefix


def parse_config(document: Mapping[str, Any], source: str = "<dict>") -> HorizonConfig:
    if not isinstance(document, Mapping):
        raise ConfigError(source, [("", "expected a mapping at the top level")])
    try:
        return HorizonConfig.model_validate(dict(horizon_args(document)))
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc)) from None


def read_document(path: str | os.PathLike, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """The YAML mapping at ``path`` ({} when empty); a file that cannot be read as a YAML
    mapping raises ``error`` naming it, never a traceback."""
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
    if document is not None and not isinstance(document, dict):
        raise error(str(p), [("", f"expected a mapping at the top level, not a {type(document).__name__}")])
    return document or {}


def load_config(path: str | os.PathLike) -> HorizonConfig:
    """What the profile file serves: ``args`` with the ingress's live routing settings, if any."""
    from .live import effective_config  # live builds on this module

    return effective_config(read_document(path), source=str(path))
