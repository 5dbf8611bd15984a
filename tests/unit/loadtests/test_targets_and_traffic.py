import random
import struct
import base64

import pytest

from loadtests.lib.targets import TargetRefused, check_local_target
from loadtests.lib.traffic import PROMPTS, SEED_MIX, TrafficSettings, parse_mix, plan_request, tiny_png


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000/sim/", "http://[::1]:9000"])
def test_loopback_targets_are_accepted(url):
    assert check_local_target(url) == url.rstrip("/")


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "https://api.openai.com", "http://127.0.0.1.evil.com",
                                 "ftp://127.0.0.1", "http://user:pw@127.0.0.1:8000", "127.0.0.1:8000", ""])
def test_other_targets_are_refused(url):
    with pytest.raises(TargetRefused):
        check_local_target(url)


def test_seed_mix_shares():
    cheap = SEED_MIX["chat"] + SEED_MIX["code"] + SEED_MIX["vision"]
    assert cheap == pytest.approx(0.65) and SEED_MIX["reasoning"] == 0.20 and SEED_MIX["complex"] == 0.15


def test_drawn_requests_follow_the_mix_and_fusion_share():
    rng = random.Random(1)
    settings = TrafficSettings(fusion_share=0.25, stream_share=0.5)
    drawn = [plan_request(rng, settings) for _ in range(6000)]
    for category, share in SEED_MIX.items():
        assert sum(p.category == category for p in drawn) / len(drawn) == pytest.approx(share, abs=0.02)
    fusion = [p for p in drawn if p.fusion]
    assert len(fusion) / len(drawn) == pytest.approx(0.25, abs=0.02)
    assert all(p.body["model"] == "vllm-sr/fusion" for p in fusion)
    assert all(p.body["model"] == "vllm-sr/auto" for p in drawn if not p.fusion)
    streams = [p for p in drawn if p.stream]
    assert len(streams) / len(drawn) == pytest.approx(0.5, abs=0.03)
    assert all(p.body["stream_options"] == {"include_usage": True} for p in streams)
    assert all("stream_options" not in p.body and p.body["stream"] is False for p in drawn if not p.stream)


def test_vision_requests_carry_a_valid_png_and_code_requests_code():
    rng = random.Random(0)
    vision = plan_request(rng, TrafficSettings(mix={"vision": 1.0}))
    parts = vision.body["messages"][0]["content"]
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    png = base64.b64decode(url.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (16, 16)
    code = plan_request(rng, TrafficSettings(mix={"code": 1.0}))
    assert "```" in code.body["messages"][0]["content"]
    assert code.body["max_tokens"] == 64


def test_tiny_png_dimensions():
    png = tiny_png(20, 30)
    assert struct.unpack(">II", png[16:24]) == (20, 30)


def test_settings_validation_and_mix_parsing():
    assert parse_mix("chat=0.5, code=0.5") == {"chat": 0.5, "code": 0.5}
    with pytest.raises(ValueError, match="unknown traffic categories"):
        TrafficSettings(mix={"poetry": 1.0})
    with pytest.raises(ValueError):
        TrafficSettings(fusion_share=1.5)
    with pytest.raises(ValueError):
        TrafficSettings(mix={"chat": 0.0})
    assert set(SEED_MIX) == set(PROMPTS)
