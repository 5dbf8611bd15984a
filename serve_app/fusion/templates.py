"""Built-in Fusion prompts, kept as data files under ``configs/prompts/<version>/``.

A prompt set is a directory named by its ``judge_prompt_version`` (``fusion-v1`` ships with the
project). A decision whose version names a directory that exists uses that set; any other
version is only a label written into the trace and the default set is used. Decisions replace
single prompts with ``analysis_template`` / ``synthesis_template``.

Rendering substitutes ``{{original}}``, ``{{responses}}``, ``{{analysis}}`` (and
``{{output_contract}}`` in the contract suffix) in one pass, so placeholder-like text inside a
panel answer is never expanded again.

A set may also carry ``analysis_schema.json``: the JSON Schema the separate-mode analysis is
constrained to (the engine's structured outputs), with bounds that keep it short.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

DEFAULT_PROMPT_VERSION = "fusion-v1"
# Where the built-in sets live; HORIZON_PROMPTS_DIR points elsewhere (e.g. a mounted volume).
DEFAULT_PROMPTS_DIR = Path(__file__).resolve().parents[2] / "configs" / "prompts"

_PLACEHOLDER = re.compile(r"\{\{\s*(original|responses|analysis|output_contract)\s*\}\}")

# Files every prompt set must provide (file stem -> attribute of PromptSet).
_FILES = ("analysis", "synthesis", "one_call", "none", "output_contract",
          "grounding_weight", "grounding_annotate")


@dataclass(frozen=True)
class PromptSet:
    version: str
    analysis: str            # separate: the JSON analysis call
    synthesis: str           # separate: the final call
    one_call: str            # one_call: compare, resolve and answer in one call
    none: str                # none: synthesise directly
    output_contract: str     # suffix carrying the decision's output_contract
    grounding_weight: str    # note before the answers under grounding policy: weight
    grounding_annotate: str  # note before the answers under policy: annotate / filter
    analysis_schema: Optional[dict[str, Any]] = None  # analysis_schema.json, when the set has one

    def terminal(self, analysis_mode: str) -> str:
        """The built-in prompt of the final (tool-capable) call for an analysis mode."""
        return {"separate": self.synthesis, "one_call": self.one_call, "none": self.none}[analysis_mode]


class PromptTemplates:
    """Loads prompt sets from a directory tree, once per version."""

    def __init__(self, root: str | os.PathLike | None = None,
                 default_version: str = DEFAULT_PROMPT_VERSION):
        self.root = Path(root or os.environ.get("HORIZON_PROMPTS_DIR") or DEFAULT_PROMPTS_DIR)
        self.default_version = default_version
        self._sets: dict[str, PromptSet] = {}
        # Fail at construction, not on the first Fusion request.
        self.get(default_version)

    def get(self, version: str) -> PromptSet:
        """The set named ``version`` when its directory exists, else the default set."""
        key = version if self.has(version) else self.default_version
        if key not in self._sets:
            self._sets[key] = self._load(key)
        return self._sets[key]

    def has(self, version: str) -> bool:
        return (self.root / version).is_dir()

    def _load(self, version: str) -> PromptSet:
        directory = self.root / version
        texts: dict[str, str] = {}
        for name in _FILES:
            path = directory / f"{name}.txt"
            if not path.is_file():
                raise FileNotFoundError(f"Fusion prompt set {version!r} lacks {path}")
            texts[name] = path.read_text(encoding="utf-8")
        schema_path = directory / "analysis_schema.json"
        schema = json.loads(schema_path.read_text(encoding="utf-8")) if schema_path.is_file() else None
        return PromptSet(version=version, analysis_schema=schema, **texts)


def render(template: str, values: Mapping[str, str]) -> str:
    """Substitute the known ``{{placeholders}}``; unknown or absent ones render empty."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), template)
