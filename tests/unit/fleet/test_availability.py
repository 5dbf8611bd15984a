"""The fail-fast check before a model call: a deployment that is not up is a 503 at once."""

import asyncio

import pytest

from serve_app.errors import ModelUnavailable
from serve_app.fleet.availability import DeploymentBoard, DeploymentState

PENDING = ("Deployment 'model-k2' in application 'horizon' has 1 replicas that have taken more "
           "than 30s to be scheduled. Resources required for each replica: {'CPU': 2.0}, total "
           "resources available: {'CPU': 0.5}.")


def board(**states: DeploymentState) -> DeploymentBoard:
    b = DeploymentBoard(read=lambda: states)
    b.update(states)
    return b


def test_a_deployment_with_no_replica_that_is_not_coming_fails_fast_naming_it_and_the_reason():
    b = board(**{"model-k2": DeploymentState("UPDATING", 0, PENDING)})
    with pytest.raises(ModelUnavailable) as info:
        b.check("model-k2", "qwen-72b")
    err = info.value
    assert err.status == 503 and err.retry_after
    assert "'model-k2'" in err.message and "qwen-72b" in err.message
    assert "taken more than 30s to be scheduled" in err.message
    assert err.details["deployment_status"] == "UPDATING"


@pytest.mark.parametrize("state", [DeploymentState("HEALTHY", 1), DeploymentState("HEALTHY", 0),
                                   DeploymentState("UPSCALING", 0), DeploymentState("UNHEALTHY", 1)])
def test_running_or_scaled_to_zero_deployments_are_let_through(state):
    board(**{"model-k2": state}).check("model-k2", "k2")      # no exception


def test_an_unknown_deployment_is_let_through_until_the_board_knows_it():
    board().check("model-k2", "k2")


def test_failed_and_unhealthy_deployments_without_replicas_fail_fast():
    for status in ("DEPLOY_FAILED", "UNHEALTHY"):
        with pytest.raises(ModelUnavailable):
            board(**{"model-x": DeploymentState(status, 0, "boom")}).check("model-x", "x")


def test_started_remembers_deployments_seen_up_once():
    b = board(**{"model-k2": DeploymentState("UPDATING", 0)})
    assert not b.started("model-k2")
    b.update({"model-k2": DeploymentState("HEALTHY", 1)})
    b.update({"model-k2": DeploymentState("UNHEALTHY", 0, "replica died")})
    assert b.started("model-k2")


def test_refresh_reads_in_a_thread_and_survives_a_failing_controller():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("controller busy")
        return {"model-k2": DeploymentState("HEALTHY", 1)}

    b = DeploymentBoard(read=read)
    asyncio.run(b.refresh())
    assert b.states == {}
    asyncio.run(b.refresh())
    assert b.get("model-k2").running == 1
