"""VisionSettings validation and its agreement with the vision engine's own image limit."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from serve_app.config.loader import ConfigError, parse_config
from serve_app.config.gateway import VisionSettings

ROOT = Path(__file__).resolve().parents[3]


def _fleet_doc() -> dict:
    return yaml.safe_load((ROOT / "configs" / "fleet.yaml").read_text(encoding="utf-8"))


def test_fleet_vision_settings():
    cfg = parse_config(_fleet_doc())
    assert cfg.vision.allow_remote_urls is False
    assert cfg.vision.allowed_formats == ["png", "jpeg", "webp", "gif"]
    assert cfg.vision.max_images_per_request == cfg.model("minicpm-v").engine.limit_mm_per_prompt["image"]
    # Inline images (base64 is 4/3 larger) must fit the request body limit.
    assert cfg.vision.max_decoded_bytes * 4 / 3 < cfg.global_.server.max_request_body_bytes


def test_more_images_than_the_engine_accepts_is_a_config_error():
    doc = _fleet_doc()
    doc["applications"][0]["args"]["vision"]["max_images_per_request"] = 5
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert info.value.paths == ["vision.max_images_per_request"]
    assert "limit_mm_per_prompt.image = 4" in str(info.value)


def test_unknown_format_and_inverted_bounds_are_refused():
    with pytest.raises(ValueError):
        VisionSettings(allowed_formats=["tiff"])
    with pytest.raises(ValueError, match="must not exceed"):
        VisionSettings(min_width=100, max_width=50)
