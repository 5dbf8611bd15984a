"""The bottom of the configuration: the strict base model, the path-carrying error, and every
closed list of allowed values, each written once.

A ``Literal`` type is the one definition of a vocabulary; the tuple beside it is derived from it
(``get_args``) for code that needs to iterate. Nothing here imports the rest of the project.
"""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

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


# An amount of a Ray custom resource (per replica, or what a node offers): Ray refuses a
# negative one when it schedules, long after the profile loaded.
ResourceAmount = Annotated[float, Field(ge=0)]


def _ray_label_syntax(labels: dict[str, str]) -> dict[str, str]:
    # Ray's own check (`ray start --labels` runs it; Kubernetes label syntax), run when the
    # profile loads: otherwise a bad key fails at `ray start` on a node, in KubeRay's
    # validation of the worker group, or as a replica whose label selector Ray refuses.
    if labels:
        from ray._private.label_utils import validate_node_label_syntax

        validate_node_label_syntax(labels)
    return labels


# Ray node labels: what a node type offers (``ray start --labels``), or what a replica's label
# selector asks of a node (exact values: the placement check compares them one to one).
RayLabels = Annotated[dict[str, str], AfterValidator(_ray_label_syntax)]


class PathError(ValueError):
    """A validation error that knows the exact path of the offending key below its section."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


def path_exists(path: Path, *, file: bool = False) -> bool:
    """Whether ``path`` exists (is a file, with ``file``); False, not an OSError, for a name
    the filesystem refuses to look up (over 255 bytes a component, say), so that a profile
    naming one fails as "not found", naming its key."""
    try:
        return path.is_file() if file else path.exists()
    except OSError:
        return False


_NUMBERS = (int, float)


def _number_shape(annotation: Any) -> Optional[str]:
    """How a field's type holds numbers, bool aside: "scalar" (``int``, ``Optional[float]``),
    "mapping" (``dict[str, float]``), "sequence" (``list[int]``), or None."""
    annotation = _bare(annotation)
    origin, args = get_origin(annotation), tuple(_bare(a) for a in get_args(annotation))
    if annotation in _NUMBERS:
        return "scalar"
    if origin in (Union, UnionType):  # Optional[...], nested ones included
        members = [a for a in args if a is not type(None)]
        if bool not in members and any(_number_shape(a) == "scalar" for a in members):
            return "scalar"
    if origin is dict and len(args) == 2 and args[1] in _NUMBERS:
        return "mapping"
    if origin in (list, tuple) and args and all(a in _NUMBERS or a is Ellipsis for a in args):
        return "sequence"
    return None


def _bare(annotation: Any) -> Any:
    """``Annotated[float, Field(...)]`` -> ``float``."""
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, aliases allowed, numbers finite.

    YAML's ``true`` where a number belongs is a mistake pydantic would read as 1 (a
    ``tensor_parallel_size: true``), and ``.nan`` or ``.inf`` passes a field without bounds (a
    temperature of nan reaches the engine): both fail at load, naming the key."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True,
                              allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_true_or_false_for_a_number(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, alias, shape in _number_fields(cls):
            key = name if name in data else alias
            if key is None or key not in data:
                continue
            value = data[key]
            if shape == "scalar" and isinstance(value, bool):
                raise PathError(key, f"expected a number, got {str(value).lower()}")
            if shape == "mapping" and isinstance(value, dict):
                for item, number in value.items():
                    if isinstance(number, bool):
                        raise PathError(f"{key}.{item}", f"expected a number, got {str(number).lower()}")
            if shape == "sequence" and isinstance(value, list):
                for i, number in enumerate(value):
                    if isinstance(number, bool):
                        raise PathError(f"{key}[{i}]", f"expected a number, got {str(number).lower()}")
        return data


# Per model class, its fields that hold numbers: (name, alias, shape). Worked out once, since a
# Fusion request validates its plugin against these models.
_NUMBER_FIELDS: dict[type, list[tuple[str, Optional[str], str]]] = {}


def _number_fields(model: type[BaseModel]) -> list[tuple[str, Optional[str], str]]:
    fields = _NUMBER_FIELDS.get(model)
    if fields is None:
        fields = [(name, field.alias, shape) for name, field in model.model_fields.items()
                  if (shape := _number_shape(field.annotation)) is not None]
        _NUMBER_FIELDS[model] = fields
    return fields
