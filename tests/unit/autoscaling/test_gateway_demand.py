"""The gateway's backlog on its way to the autoscaler, without Ray: the board (actor body), an
ingress replica's publisher, a model replica's reader, and the ingress wiring that feeds them."""

from __future__ import annotations

import asyncio

import pytest

from deployments.gateway_demand import (GATEWAY_WAITING, DemandPublisher, GatewayDemandBoard,
                                        GatewayDemandReader, replica_autoscaling_stats)
from deployments.simulated import SimulatedLLMDeployment
from fakes.ray_remote import FakeActorHandle
from serve_app.actor_link import ActorUnreachable
from serve_app.fleet.availability import DeploymentState

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_the_board_sums_ingress_replicas_and_forgets_silent_ones():
    clock = Clock()
    board = GatewayDemandBoard(max_age_s=3.0, clock=clock)
    board.report("ingress-a", {"model-k2": 20, "model-coder": 1})
    board.report("ingress-b", {"model-k2": 12})
    assert board.waiting("model-k2") == 32 and board.waiting("model-coder") == 1
    assert board.waiting("model-qwen-72b") == 0
    clock.t += 2.0
    board.report("ingress-b", {"model-k2": 5})          # a's report is 2 s old, b's is new
    assert board.waiting("model-k2") == 25
    clock.t += 2.0                                       # a stopped reporting (died, scaled down)
    assert board.waiting("model-k2") == 5


async def test_the_board_answers_a_report_with_the_roll_call_of_the_ingress_replicas():
    clock = Clock()
    board = GatewayDemandBoard(max_age_s=3.0, clock=clock)
    board.report("ingress-a", {}, {"routing_settings": "aaa", "routing": "ready"})
    roll_call = board.report("ingress-b", {"model-k2": 1}, {"routing_settings": "bbb", "routing": "pending"})
    assert roll_call == {"replicas": 2, "routing_settings": {"aaa": 1, "bbb": 1},
                         "routing": {"pending": 1, "ready": 1}}
    clock.t += 2.0
    roll_call = board.report("ingress-b", {}, {"routing_settings": "aaa", "routing": "ready"})
    assert roll_call == {"replicas": 2, "routing_settings": {"aaa": 2}, "routing": {"ready": 2}}
    clock.t += 2.0                                       # a stopped reporting
    assert board.ingress() == {"replicas": 1, "routing_settings": {"aaa": 1}, "routing": {"ready": 1}}
    board.report("ingress-c", {"model-k2": 2})           # a report without a routing state
    assert board.ingress()["replicas"] == 2 and board.ingress()["routing_settings"] == {"aaa": 1}
    assert board.waiting("model-k2") == 2


async def test_the_publisher_reports_its_lines_and_reconnects_after_a_failure():
    board = GatewayDemandBoard()
    handle = FakeActorHandle(board)
    connects: list[int] = []
    lines = {"model-k2": 7.0}

    def connect():
        connects.append(1)
        return handle

    clock = Clock()
    pub = DemandPublisher(lambda: lines, connect, source="replica-1", interval_s=0.01, clock=clock,
                          routing=lambda: {"routing_settings": "aaa", "routing": "ready"})
    assert pub.roll_call is None
    await pub.publish_once()
    assert board.waiting("model-k2") == 7 and len(connects) == 1
    assert pub.roll_call == {"replicas": 1, "routing_settings": {"aaa": 1}, "routing": {"ready": 1}}
    handle.down = True
    with pytest.raises(ConnectionError):
        await pub.publish_once()
    clock.t += 2.0
    assert pub.roll_call is not None     # the last answer, while a report of it still counts
    clock.t += 2.0
    assert pub.roll_call is None         # then no roll call rather than a stale one
    handle.down = False
    lines["model-k2"] = 3.0
    pub.start()
    await asyncio.sleep(0.05)
    await pub.aclose()
    assert board.waiting("model-k2") == 3 and len(connects) == 2   # looked the board up again


async def test_the_publisher_hands_on_every_roll_call_and_none_once_the_board_is_gone():
    """The gateway sizes its admission lines by what ``on_roll_call`` gets: after every report,
    answered or not, including when there is no board to connect to at all."""
    board = GatewayDemandBoard()
    clock = Clock()
    present = {"board": FakeActorHandle(board)}

    def connect():
        if present["board"] is None:
            raise ValueError("Failed to look up actor 'horizon-state.v2:sim'")
        return present["board"]

    pub = DemandPublisher(dict, connect, source="replica-1", clock=clock)
    seen: list = []
    pub.on_roll_call = seen.append
    board.report("replica-2", {})
    await pub.publish_once()
    assert seen == [pub.roll_call] and seen[0]["replicas"] == 2
    present["board"].down = True          # the actor dies: this report fails ...
    with pytest.raises(ConnectionError):
        await pub.publish_once()
    present["board"] = None               # ... and the next ones find no board to connect to
    for _ in range(2):
        clock.t += 2.0
        with pytest.raises(ActorUnreachable, match="Failed to look up actor"):
            await pub.publish_once()
    # The last answer while it counts (3 s), then None: the lines go back to Serve's count.
    assert seen[1] == seen[2] == seen[0] and seen[3] is None and len(seen) == 4


async def test_the_reader_relays_the_board_and_degrades_to_nothing():
    board = GatewayDemandBoard()
    board.report("ingress-a", {"model-k2": 9})
    handle = FakeActorHandle(board)
    clock = Clock()
    present = {"board": None}

    def lookup():
        if present["board"] is None:
            raise ValueError("Failed to look up actor 'horizon-state.v2:sim'")
        return present["board"]

    reader = GatewayDemandReader("model-k2", "sim", lookup=lookup, clock=clock, timeout_s=0.05, retry_s=5.0)
    assert await reader.read() is None                  # no board yet (the ingress is starting)
    present["board"] = handle
    assert await reader.read() is None                  # ... and it does not look again at once
    clock.t += 5.0
    assert await reader.read() == 9.0
    handle.delay_s = 1.0                                 # a board that does not answer in time
    assert await reader.read() is None
    handle.delay_s = 0.0
    clock.t += 5.0
    assert await reader.read() == 9.0
    assert await replica_autoscaling_stats({"engine_waiting": 0.0}, reader) == {
        "engine_waiting": 0.0, GATEWAY_WAITING: 9.0}
    assert await replica_autoscaling_stats({"engine_waiting": 0.0}, None) == {"engine_waiting": 0.0}


async def test_the_simulated_replica_reports_the_gateway_backlog_beside_its_engine():
    board = GatewayDemandBoard()
    board.report("ingress-a", {"model-qwen-72b": 4})
    replica = SimulatedLLMDeployment.func_or_class("qwen-72b")
    replica._demand_reader = GatewayDemandReader("model-qwen-72b", "sim", lookup=lambda: FakeActorHandle(board))
    stats = await replica.record_autoscaling_stats()
    assert stats == {"engine_waiting": 0.0, "engine_running": 0.0, GATEWAY_WAITING: 4.0}


async def test_the_ingress_publishes_each_engines_line_and_resizes_it_with_the_board(tmp_path):
    from fakes.gateway import running_gateway

    with running_gateway(tmp_path / "intents") as (client, gateway, _):
        fleet = gateway.fleet
        assert set(fleet.waiting_by_deployment()) == {"model-k2", "model-qwen-72b", "model-r1-distill",
                                                      "model-coder", "model-minicpm-v"}
        per_replica = fleet.admission("k2").per_model_replica
        gateway.board.update({"ingress": DeploymentState("HEALTHY", 2),
                              "model-k2": DeploymentState("UPSCALING", 3)})
        admission = client.get("/health").json()["models"]["k2"]["admission"]
        assert admission["model_replicas"] == 3 and admission["ingress_replicas"] == 2
        assert admission["capacity"] == -(-per_replica * 3 // 2)
        # The demand board's roll call counts three ingress replicas before Serve's next read
        # does: it wins while it is fresh; without one (the board unreachable), Serve's count.
        fleet.follow_ingress_roll_call(3)
        assert fleet.admission("k2").ingress_replicas == 3
        assert fleet.admission("k2").capacity == per_replica        # 3 model replicas, 3 ingress
        gateway.board.update({"ingress": DeploymentState("HEALTHY", 2),
                              "model-k2": DeploymentState("HEALTHY", 3)})
        assert fleet.admission("k2").ingress_replicas == 3
        fleet.follow_ingress_roll_call(None)
        assert fleet.admission("k2").ingress_replicas == 2


async def test_a_backlog_counts_as_waiting_on_scale_out_only_below_the_models_max_replicas(tmp_path):
    from fakes.gateway import gateway_profile, running_gateway

    doc = gateway_profile(tmp_path / "intents")
    qwen = next(m for m in doc["models"] if m["alias"] == "qwen-72b")
    qwen["scaling"] = {**(qwen.get("scaling") or {}), "min_replicas": 1, "max_replicas": 3}
    with running_gateway(tmp_path / "intents", doc=doc) as (_, gateway, _):
        fleet = gateway.fleet
        most = gateway.cfg.model("qwen-72b").scaling.max_replicas
        assert most == 3
        one = {"model-qwen-72b": DeploymentState("HEALTHY", 1)}
        assert not fleet.waits_on_scale_out(one)           # nothing waits
        line = fleet.admission("qwen-72b")
        line._waiting = 3                                   # three requests in its line
        try:
            assert fleet.waits_on_scale_out(one)
            # At its maximum no replica is coming: the board may keep its steady cadence.
            assert not fleet.waits_on_scale_out({"model-qwen-72b": DeploymentState("HEALTHY", most)})
        finally:
            line._waiting = 0
