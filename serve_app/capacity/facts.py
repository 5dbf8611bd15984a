"""Model facts (architecture and measured operating figures) loaded from YAML data.

The planner's arithmetic needs a handful of numbers per checkpoint (parameters, layers, KV
heads, head dim, native precision); they live in ``cluster/model_facts.yaml`` so planning a new
model means adding data, not code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serve_app.config.base import path_exists
from serve_app.config.loader import ConfigError, read_document, validation_problems
from serve_app.config.models import ModelSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FACTS_FILE = "cluster/model_facts.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MeasuredFigures(_Strict):
    """Operating figures of one model on the production fleet (SPEC §2)."""

    ttft_s: float = Field(..., gt=0)
    total_s: float = Field(..., gt=0)
    # Requests one replica serves at once before latency degrades (suggested max concurrency).
    max_concurrency: int = Field(..., ge=1)
    # Average prompt + completion tokens a request keeps in the KV cache.
    tokens_per_request: int = Field(..., ge=1)


class ModelFact(_Strict):
    kind: Literal["decoder", "encoder"] = "decoder"
    also_known_as: list[str] = Field(default_factory=list)
    # True when the numbers are assumptions back-solved from measurements (K2).
    derived: bool = False
    notes: str = ""
    params_b: float = Field(..., gt=0)
    active_params_b: Optional[float] = Field(None, gt=0)
    native_bits: int = Field(16, ge=1)
    layers: int = Field(..., ge=1)
    hidden_size: int = Field(..., ge=1)
    attention_heads: int = Field(..., ge=1)
    kv_heads: int = Field(..., ge=1)
    head_dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=1)
    max_position_embeddings: int = Field(..., ge=1)
    measured: Optional[MeasuredFigures] = None


class ModelFacts(_Strict):
    """The whole facts file: precision tables and one :class:`ModelFact` per checkpoint."""

    quantization_bits: dict[str, int] = Field(default_factory=dict)
    kv_cache_dtype_bytes: dict[str, float] = Field(default_factory=lambda: {"auto": 2})
    models: dict[str, ModelFact] = Field(default_factory=dict)

    def for_model(self, model: ModelSettings) -> Optional[ModelFact]:
        """Facts of a profile model, by its engine.model id (or a listed alias path); else None."""
        ref = model.engine.model
        if ref in self.models:
            return self.models[ref]
        for fact in self.models.values():
            if ref in fact.also_known_as:
                return fact
        return None

    def weight_bits(self, model: ModelSettings, fact: ModelFact) -> int:
        quant = model.engine.quantization
        if quant is None:
            return fact.native_bits
        if quant not in self.quantization_bits:
            raise KeyError(f"no bits known for quantization {quant!r}; add it to quantization_bits")
        return self.quantization_bits[quant]

    def kv_bytes_per_element(self, model: ModelSettings) -> float:
        dtype = str(model.engine.engine_kwargs.get("kv_cache_dtype", "auto"))
        if dtype not in self.kv_cache_dtype_bytes:
            raise KeyError(f"no size known for kv_cache_dtype {dtype!r}; add it to kv_cache_dtype_bytes")
        return self.kv_cache_dtype_bytes[dtype]


class FactsError(ConfigError):
    """A model facts file that cannot be used, one line per problem, keys as in its YAML."""

    what = "model facts file"


def resolve_path(path: str | os.PathLike) -> Path:
    """Relative paths resolve from the working directory first, then the project root."""
    p = Path(path)
    if p.is_absolute() or path_exists(p):
        return p
    return PROJECT_ROOT / p


def load_model_facts(path: str | os.PathLike = DEFAULT_FACTS_FILE) -> ModelFacts:
    p = resolve_path(path)
    document = read_document(p, error=FactsError)
    try:
        return ModelFacts.model_validate(document)
    except ValidationError as exc:
        raise FactsError(str(p), validation_problems(exc)) from None
