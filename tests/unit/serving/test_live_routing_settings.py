"""New live routing settings on a running gateway (Gateway.reconfigure): the current routing
serves until the new one has started, then hands over; a failed start leaves the current one."""

from __future__ import annotations

import asyncio
import copy

import pytest

from fakes.fleet import FakeEmbedder, FakeFleet, FakeModel
from fakes.gateway import ALIASES, gateway_profile
from fakes.routing import VOCABULARY, chat
from serve_app.app import compose_gateway
from serve_app.chat.context import ChatCall
from serve_app.config.live import live_config
from serve_app.config.loader import parse_config
from serve_app.errors import ModelUnavailable
from serve_app.fleet.availability import DeploymentState

pytestmark = pytest.mark.asyncio


class TemplateGate(FakeEmbedder):
    """Embeds queries (one text) at once; holds template batches (a routing start) until
    ``open`` is set, or fails them when ``broken``."""

    def __init__(self):
        super().__init__(VOCABULARY)
        self.open = asyncio.Event()
        self.open.set()
        self.broken = False
        self.down = False

    async def embed(self, texts):
        if len(texts) > 1:
            if self.broken:
                raise RuntimeError("template batch rejected")
            if self.down:
                raise ModelUnavailable("bge-m3 has no running replica")
            await self.open.wait()
        return await super().embed(texts)


def _k2_for_general_chat(doc):
    """Live settings that send general chat (short messages) to k2 instead of qwen-72b."""
    decisions = copy.deepcopy(doc["routing"]["decisions"])
    for d in decisions:
        if d["name"] == "general_chat":
            d["modelRefs"] = [{"model": "k2"}]
    return {"routing": {"decisions": decisions}}


async def _started(tmp_path, embedder, cfg=None, demand=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    doc = gateway_profile(tmp_path)
    fleet = FakeFleet(*(FakeModel(a) for a in ALIASES), embedder=embedder)
    gateway = compose_gateway(cfg or parse_config(doc), base_fleet=fleet)
    gateway.demand = demand
    gateway.start()
    gateway.join_roll_call()
    await gateway.routing_started(10.0)
    # Every deployment up (no Serve controller here to say so).
    gateway.board.update({f"model-{a}": DeploymentState("HEALTHY", 1) for a in (*ALIASES, "embed")})
    assert gateway.ready and (await gateway.health())["status"] == "ready"
    return doc, gateway


async def _model_for_hello(gateway) -> str:
    result, _headers = await gateway.route(ChatCall(model="auto", body=chat("Hello")), debug=False)
    return result["model"]


async def test_new_settings_take_over_once_their_routing_has_started(tmp_path):
    embedder = TemplateGate()
    doc, gateway = await _started(tmp_path, embedder)
    assert await _model_for_hello(gateway) == "qwen-72b"
    before = gateway.service
    first_digest = (await gateway.health())["routing_settings"]

    embedder.open.clear()
    await gateway.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"), wait_s=0.2)
    # The new routing is still starting: the current settings answer meanwhile.
    assert gateway.update is not None and gateway.update.status == "pending"
    assert (await gateway.health())["routing_update"]["status"] == "pending"
    assert await _model_for_hello(gateway) == "qwen-72b" and gateway.service is before

    embedder.open.set()
    for _ in range(100):
        if gateway.update is None:
            break
        await asyncio.sleep(0.02)
    assert gateway.update is None and gateway.service is not before
    assert await _model_for_hello(gateway) == "k2"
    health = await gateway.health()
    assert "routing_update" not in health and health["status"] == "ready"
    # The digest of the settings in effect changed, and is what a replica started with them says.
    assert health["routing_settings"] != first_digest
    _doc, fresh = await _started(tmp_path / "fresh", TemplateGate(),
                                 live_config(doc, _k2_for_general_chat(doc), "test"))
    assert (await fresh.health())["routing_settings"] == health["routing_settings"]


async def test_settings_whose_routing_fails_to_start_leave_the_current_ones(tmp_path):
    embedder = TemplateGate()
    doc, gateway = await _started(tmp_path, embedder)
    embedder.broken = True
    await gateway.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"), wait_s=5.0)
    assert gateway.update is not None and gateway.update.failed
    assert "template batch rejected" in gateway.update.detail
    assert await _model_for_hello(gateway) == "qwen-72b"
    health = await gateway.health()
    assert health["status"] == "degraded" and health["routing_update"]["status"] == "failed"


async def test_a_later_change_replaces_one_still_starting(tmp_path):
    embedder = TemplateGate()
    doc, gateway = await _started(tmp_path, embedder)
    embedder.open.clear()
    await gateway.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"), wait_s=0.1)
    # Back to the profile's own settings before the first change started.
    await gateway.reconfigure(live_config(doc, {}, "test"), wait_s=0.1)
    embedder.open.set()
    for _ in range(100):
        if gateway.update is None:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    assert gateway.update is None
    assert await _model_for_hello(gateway) == "qwen-72b"


async def test_a_change_still_waited_for_returns_when_a_later_one_replaces_it(tmp_path):
    """Serve may send a second user_config while the first reconfigure still waits: the first
    call returns (it must not raise into Serve, which would stop the replica)."""
    embedder = TemplateGate()
    doc, gateway = await _started(tmp_path, embedder)
    embedder.open.clear()
    first = asyncio.create_task(gateway.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"),
                                                    wait_s=30.0))
    await asyncio.sleep(0.1)
    second = asyncio.create_task(gateway.reconfigure(live_config(doc, {}, "test"), wait_s=30.0))
    await asyncio.wait_for(first, 5.0)
    assert not second.done()
    embedder.open.set()
    await asyncio.wait_for(second, 5.0)
    assert gateway.update is None and await _model_for_hello(gateway) == "qwen-72b"


async def test_health_says_what_new_settings_wait_for(tmp_path):
    embedder = TemplateGate()
    doc, gateway = await _started(tmp_path, embedder)
    embedder.down = True
    await gateway.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"), wait_s=0.3)
    update = (await gateway.health())["routing_update"]
    assert update["status"] == "pending" and "bge-m3 has no running replica" in update["detail"], update
    assert await _model_for_hello(gateway) == "qwen-72b"
    embedder.down = False
    for _ in range(200):  # the start retries every 2 s
        if gateway.update is None:
            break
        await asyncio.sleep(0.05)
    assert gateway.update is None and await _model_for_hello(gateway) == "k2"


async def test_rejected_settings_are_shown_on_health(tmp_path):
    _doc, gateway = await _started(tmp_path, TemplateGate())
    gateway.reject_update("invalid configuration horizon-ingress user_config:\n  routing: bad")
    health = await gateway.health()
    assert health["status"] == "degraded"
    assert health["routing_update"]["status"] == "failed"
    assert "routing: bad" in health["routing_update"]["detail"]
    assert await _model_for_hello(gateway) == "qwen-72b"


async def test_every_replicas_health_says_whether_all_ingress_replicas_took_a_change(tmp_path):
    """Two ingress replicas report to one demand board; either one's /health carries the roll
    call: two digests while one replica has the change, one digest on both once both have it."""
    from deployments.gateway_demand import DemandPublisher, GatewayDemandBoard
    from fakes.ray_remote import FakeActorHandle

    board = FakeActorHandle(GatewayDemandBoard())
    replicas = []
    for name in ("a", "b"):
        # Reports only when the test says (publish_once): a day-long interval for the loop.
        demand = DemandPublisher(dict, lambda: board, source=name, interval_s=86400)
        doc, gateway = await _started(tmp_path, TemplateGate(), demand=demand)
        replicas.append(gateway)
    a, b = replicas

    async def roll_call(gateway):
        """``gateway``'s roll call once every replica has reported (its own report last: the
        board's answer to it is what its /health shows)."""
        for g in sorted(replicas, key=lambda g: g is gateway):
            await g.demand.publish_once()
        return (await gateway.health())["ingress"]

    same = (await a.health())["routing_settings"]
    assert await roll_call(b) == {"replicas": 2, "routing_settings": {same: 2}, "routing": {"ready": 2}}
    # Each replica's admission lines are its share among the replicas in the roll call (Serve's
    # states, the deployment board's, still say one ingress replica).
    for g in replicas:
        await roll_call(g)
        line = (await g.health())["models"]["k2"]["admission"]
        assert line["ingress_replicas"] == 2 and line["capacity"] == -(-line["per_model_replica"] // 2)

    await a.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"), wait_s=5.0)
    changed = (await a.health())["routing_settings"]
    assert changed != same
    assert (await roll_call(b))["routing_settings"] == dict(sorted({same: 1, changed: 1}.items()))

    await b.reconfigure(live_config(doc, _k2_for_general_chat(doc), "test"), wait_s=5.0)
    assert await roll_call(a) == {"replicas": 2, "routing_settings": {changed: 2}, "routing": {"ready": 2}}
    for g in replicas:
        await g.demand.aclose()
