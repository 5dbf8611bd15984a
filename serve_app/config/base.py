"""The bottom of the configuration: the strict base model, the path-carrying error, and every
closed list of allowed values, each written once.

A ``Literal`` type is the one definition of a vocabulary; the tuple beside it is derived from it
(``get_args``) for code that needs to iterate. Nothing here imports the rest of the project.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

# The seven task types (intents) of SPEC §4. Routing, sessions, fallbacks and priorities are
# keyed by them, so they are a closed set validated everywhere.
TaskType = Literal["chat", "reasoning", "code", "vision", "summary", "safety", "unknown"]
TASK_TYPES: tuple[str, ...] = get_args(TaskType)

# What a fleet member does, and which kind of deployment serves it (one module per backend
# under serve_app/fleet/backends/).
ModelRole = Literal["coordinator", "chat", "reasoning", "code", "vision", "embedding"]
ROLES: tuple[str, ...] = get_args(ModelRole)
Backend = Literal["vllm", "embedding", "simulated"]
BACKENDS: tuple[str, ...] = get_args(Backend)

# Every signal type a decision condition may reference (one module each under
# serve_app/routing/signals/).
SignalType = Literal["intent", "keyword", "code", "modality", "short_text", "context_length", "language"]
SIGNAL_TYPES: tuple[str, ...] = get_args(SignalType)

# Fusion (SPEC §5).
AnalysisMode = Literal["separate", "one_call", "none"]
ANALYSIS_MODES: tuple[str, ...] = get_args(AnalysisMode)
OnError = Literal["skip", "fail"]

ImageFormat = Literal["png", "jpeg", "webp", "gif"]


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, aliases allowed."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)


class PathError(ValueError):
    """A validation error that knows the exact path of the offending key below its section."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message
