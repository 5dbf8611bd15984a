"""Where a model's weights come from: an object-storage folder is ray.serve.llm's to download
(vLLM models), and refused at load for a FlagEmbedding model, which cannot read one."""

from __future__ import annotations

import yaml

import pytest

from serve_app.config.loader import ConfigError, horizon_args, load_config, read_document
from serve_app.tools.serve_config import load_serve_profile

BUCKET = "s3://models-bucket/Qwen2.5-Coder-32B-Instruct/"


def test_a_vllm_model_in_a_bucket_is_downloaded_by_ray_serve_llm_to_each_node():
    from serve_app.fleet.backends.vllm import build_llm_config

    coder = load_config("configs/fleet.yaml").model("coder").model_copy(deep=True)
    coder.engine.model = BUCKET
    engine = build_llm_config(coder, {}).get_engine_config()
    # ray.serve.llm mirrors the folder (CloudMirrorConfig) and loads it as the served name, not a
    # hub id; our start-up callback only skips that download for a local directory.
    assert engine.mirror_config.bucket_uri == BUCKET
    assert engine.hf_model_id == "coder"


def test_an_embedding_model_in_a_bucket_fails_at_load_naming_the_key(tmp_path):
    document = read_document("configs/fleet.yaml")
    models = horizon_args(document)["models"]
    index = next(i for i, m in enumerate(models) if m["backend"] == "embedding")
    models[index]["engine"]["model"] = "gs://models-bucket/bge-m3"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_serve_profile(str(path))
    assert err.value.paths == [f"models[{index}].engine.model"]
    assert "downloaded for vllm models only" in str(err.value)
