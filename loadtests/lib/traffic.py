"""The seed's traffic mix as OpenAI chat requests (SPEC §2 "Traffic shares").

~65 % cheap paths (general chat, code, vision), ~20 % deep reasoning, ~15 % complex reasoning.
Prompts are written to land on the sim/fleet profiles' decisions (code features, maths,
"rigorous"/"from first principles" for k2, an image part for vision), so the per-decision
statistics show routing as well as latency. A share of requests can be sent to the Fusion
entry point instead.
"""

from __future__ import annotations

import base64
import math
import random
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Optional

# category -> share of requests. Chat/code/vision together are the seed's ~65 %.
SEED_MIX: dict[str, float] = {"chat": 0.30, "code": 0.20, "vision": 0.15, "reasoning": 0.20, "complex": 0.15}

PROMPTS: dict[str, tuple[str, ...]] = {
    "chat": (
        "What are some good habits for staying focused while working from home?",
        "Can you suggest a weekend itinerary for a rainy day in a big city?",
        "How do I politely decline a meeting invitation from a colleague?",
        "What is the difference between a latte and a flat white?",
    ),
    "code": (
        "Write a Python function that merges two sorted lists:\n```python\ndef merge(a, b):\n    pass\n```",
        "Why does this JavaScript print undefined?\n```js\nconst f = () => { return\n 42 }\nconsole.log(f())\n```",
        "Refactor this into a list comprehension:\n```python\nout = []\nfor x in xs:\n    if x > 0:\n        out.append(x * 2)\n```",
    ),
    "vision": (
        "What is shown in this image? Describe the colours.",
        "Read any text in this picture and summarise the chart.",
    ),
    "reasoning": (
        "Solve for x: 3x + 7 = 2x - 5, and explain each step of the algebra.",
        "A train leaves at 3pm at 80 km/h and another at 4pm at 100 km/h on the same track. "
        "When does the second catch up? Show the maths.",
        "Prove that the sum of two odd integers is even.",
    ),
    "complex": (
        "Rigorously prove that there are infinitely many primes, then derive a bound on the n-th prime "
        "from first principles.",
        "Give a formal proof that every finite integral domain is a field, with a multi-step analysis "
        "of each lemma.",
    ),
}
FUSION_PROMPT_SUFFIX = " Please ask the panel of models (fusion) and reconcile their answers."


def tiny_png(width: int = 16, height: int = 16, rgb: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    """A valid solid-colour PNG (the profiles reject images under 16x16)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    row = b"\x00" + bytes(rgb) * width
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b"")


_IMAGE_URL = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()


@dataclass(frozen=True)
class TrafficSettings:
    """Knobs of the generated traffic (environment variables of the locustfile)."""

    mix: dict[str, float] = field(default_factory=lambda: dict(SEED_MIX))
    fusion_share: float = 0.0
    stream_share: float = 0.5
    # Request ``model`` values, chosen round-robin-at-random; the entry point by default.
    models: tuple[str, ...] = ("vllm-sr/auto",)
    fusion_model: str = "vllm-sr/fusion"
    max_tokens: Optional[int] = 64

    def __post_init__(self) -> None:
        unknown = sorted(set(self.mix) - set(PROMPTS))
        if unknown:
            raise ValueError(f"unknown traffic categories {unknown}; known: {sorted(PROMPTS)}")
        if not self.mix or any(v < 0 for v in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError("mix needs non-negative shares with a positive sum")
        for name in ("fusion_share", "stream_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1]")
        if not self.models:
            raise ValueError("models must name at least one request model")


def parse_mix(text: str) -> dict[str, float]:
    """``"chat=0.3,code=0.2"`` -> {"chat": 0.3, "code": 0.2}."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        try:
            share = float(value) if sep and key.strip() else math.nan
        except ValueError:
            share = math.nan
        if not math.isfinite(share):
            raise ValueError(f"mix entry {part!r}: expected CATEGORY=SHARE, e.g. chat=0.3")
        mix[key.strip()] = share
    return mix


@dataclass(frozen=True)
class PlannedRequest:
    category: str
    fusion: bool
    stream: bool
    body: dict[str, Any]


def plan_request(rng: random.Random, settings: TrafficSettings) -> PlannedRequest:
    """Draw one request of the mix."""
    categories = list(settings.mix)
    category = rng.choices(categories, weights=[settings.mix[c] for c in categories])[0]
    fusion = rng.random() < settings.fusion_share
    stream = rng.random() < settings.stream_share
    text = rng.choice(PROMPTS[category])
    if fusion:
        text += FUSION_PROMPT_SUFFIX
    content: Any = text
    if category == "vision":
        content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": _IMAGE_URL}}]
    body: dict[str, Any] = {
        "model": settings.fusion_model if fusion else rng.choice(settings.models),
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
    }
    if settings.max_tokens:
        body["max_tokens"] = settings.max_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    return PlannedRequest(category, fusion, stream, body)
