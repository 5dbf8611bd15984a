"""A starting ingress replica waits (bounded) for its routing before Serve puts it in rotation."""

from __future__ import annotations

import asyncio
import time

import pytest

from fakes.fleet import FakeEmbedder, FakeFleet, FakeModel
from fakes.gateway import ALIASES, gateway_profile
from fakes.routing import VOCABULARY
from serve_app.app import compose_gateway
from serve_app.config.loader import parse_config

pytestmark = pytest.mark.asyncio


class GatedEmbedder(FakeEmbedder):
    """Answers once ``open`` is set: an embedding deployment still loading."""

    def __init__(self):
        super().__init__(VOCABULARY)
        self.open = asyncio.Event()

    async def embed(self, texts):
        await self.open.wait()
        return await super().embed(texts)


async def _gateway(tmp_path, embedder):
    cfg = parse_config(gateway_profile(tmp_path))
    fleet = FakeFleet(*(FakeModel(a) for a in ALIASES), embedder=embedder)
    gateway = compose_gateway(cfg, base_fleet=fleet)
    gateway.start()
    return gateway


async def test_the_wait_ends_when_routing_has_started(tmp_path):
    embedder = GatedEmbedder()
    gateway = await _gateway(tmp_path, embedder)
    asyncio.get_running_loop().call_later(0.2, embedder.open.set)
    started = time.perf_counter()
    await gateway.routing_started(10.0)
    assert gateway.ready and time.perf_counter() - started < 5


async def test_the_wait_is_bounded_and_routing_goes_on_starting_after_it(tmp_path):
    embedder = GatedEmbedder()
    gateway = await _gateway(tmp_path, embedder)
    started = time.perf_counter()
    await gateway.routing_started(0.2)
    assert not gateway.ready and 0.15 < time.perf_counter() - started < 5
    embedder.open.set()
    await gateway.routing_started()
    assert gateway.ready
