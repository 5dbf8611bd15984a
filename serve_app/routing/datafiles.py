"""Routing data files (intent templates, the classifier prompt): where they are and how they read.

Relative paths resolve against the working directory first, then the project root, so the
same profile works from a checkout, from ``horizon route`` and inside a Serve replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import yaml

from ..config.base import TASK_TYPES, path_exists

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RoutingDataError(ValueError):
    """A template or prompt file is missing or malformed (raised at start, never per request)."""


def resolve_data_path(path: str) -> Path:
    if not path.strip():  # Path("") is the working directory: every file "exists" under it
        raise RoutingDataError("routing data file '' names no file")
    candidate = Path(path)
    if candidate.is_absolute():
        if not path_exists(candidate):
            raise RoutingDataError(f"routing data file {path!r} not found")
        return candidate
    bases = list(dict.fromkeys((Path.cwd(), PROJECT_ROOT)))
    for base in bases:
        if path_exists(base / candidate):
            return base / candidate
    raise RoutingDataError(f"routing data file {path!r} not found (looked in {' and '.join(map(str, bases))})")


@dataclass(frozen=True)
class IntentTemplates:
    """Exemplar sentences and their intents, in file order (row i of the embedding matrix)."""

    texts: tuple[str, ...]
    intents: tuple[str, ...]

    def count_by_intent(self) -> dict[str, int]:
        return {intent: self.intents.count(intent) for intent in dict.fromkeys(self.intents)}


def data_files(paths: Iterable[str]) -> list[Path]:
    """Every *.yaml file the paths name (directories: their *.yaml files, sorted)."""
    files: list[Path] = []
    for path in paths:
        resolved = resolve_data_path(path)
        files.extend(sorted(resolved.glob("*.yaml")) if resolved.is_dir() else [resolved])
    return files


def load_templates(paths: list[str]) -> IntentTemplates:
    """Read ``{intent: <task type>, examples: [...]}`` files; duplicates are dropped."""
    texts: list[str] = []
    intents: list[str] = []
    seen: set[str] = set()
    for file in data_files(paths):
        try:
            doc = yaml.safe_load(_read(file)) or {}
        except yaml.YAMLError as exc:
            raise RoutingDataError(f"{file}: YAML syntax error: {exc}") from None
        if not isinstance(doc, dict) or set(doc) - {"intent", "description", "examples"}:
            raise RoutingDataError(f"{file}: expected keys intent, description, examples")
        intent = doc.get("intent")
        if intent not in TASK_TYPES:
            raise RoutingDataError(f"{file}: intent {intent!r} is not one of {list(TASK_TYPES)}")
        examples = doc.get("examples") or []
        if not isinstance(examples, list) or not all(isinstance(e, str) and e.strip() for e in examples):
            raise RoutingDataError(f"{file}: examples must be a list of non-empty strings")
        for example in examples:
            key = example.strip().lower()
            if key not in seen:
                seen.add(key)
                texts.append(example.strip())
                intents.append(intent)
    if not texts:
        raise RoutingDataError(f"no intent templates found in {paths}")
    return IntentTemplates(tuple(texts), tuple(intents))


def _read(file: Path) -> str:
    """A data file's text; RoutingDataError naming it when it is not readable UTF-8 text (a
    directory, say: an empty path resolves to the project root)."""
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RoutingDataError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RoutingDataError(f"{file}: not UTF-8 text") from None


def load_text(path: str) -> str:
    return _read(resolve_data_path(path))
