"""The fail-fast check before a model call: a deployment that is not up is a 503 at once."""

import asyncio

import pytest

from serve_app.errors import DeploymentNotRunning, ModelUnavailable
from serve_app.fleet.availability import DeploymentBoard, DeploymentState, states_from_details

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
    # Its own type: nothing was called, so the model's breaker must not count it.
    assert isinstance(err, DeploymentNotRunning)


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


def _reads_in(b: DeploymentBoard, seconds: float) -> None:
    async def run() -> None:
        b.start()
        await asyncio.sleep(seconds)
        b._task.cancel()
    asyncio.run(run())


def test_once_all_are_up_the_board_reads_at_the_steady_cadence_unless_requests_wait():
    reads = []
    backlog = {"waiting": False}

    def read():
        reads.append(1)
        return {"model-k2": DeploymentState("HEALTHY", 1)}

    quiet = DeploymentBoard(read=read, refresh_s=0.01, steady_refresh_s=60)
    quiet.watch_backlog(lambda: backlog["waiting"])
    _reads_in(quiet, 0.3)
    assert len(reads) == 1  # all up, nothing waiting: the next read is a minute away

    reads.clear()
    backlog["waiting"] = True
    busy = DeploymentBoard(read=read, refresh_s=0.01, steady_refresh_s=60)
    busy.watch_backlog(lambda: backlog["waiting"])
    _reads_in(busy, 0.3)
    # Requests wait in a line: replicas are likely coming, so the board reads every refresh_s.
    assert len(reads) >= 5


def test_a_failing_backlog_probe_does_not_stop_the_board():
    reads = []

    def read():
        reads.append(1)
        return {"model-k2": DeploymentState("HEALTHY", 1)}

    b = DeploymentBoard(read=read, refresh_s=0.01, steady_refresh_s=0.05)
    b.watch_backlog(lambda: 1 / 0)
    _reads_in(b, 0.3)
    assert len(reads) >= 2  # still refreshing at the steady cadence


def test_states_are_read_from_the_controllers_details_dict():
    details = {"applications": {
        "horizon": {"deployments": {
            "model-k2": {"status": "UPDATING", "message": PENDING,
                         "replicas": [{"state": "PENDING_ALLOCATION"}]},
            "model-coder": {"status": "HEALTHY", "message": "",
                            "replicas": [{"state": "RUNNING"}, {"state": "RUNNING"}, {"state": "STOPPING"}]},
            "model-idle": {"status": "HEALTHY", "replicas": []}}},
        "other": {"deployments": {"model-k2": {"status": "HEALTHY", "replicas": [{"state": "RUNNING"}]}}}}}
    states = states_from_details(details, "horizon")
    assert states == {"model-k2": DeploymentState("UPDATING", 0, PENDING),
                      "model-coder": DeploymentState("HEALTHY", 2, ""),
                      "model-idle": DeploymentState("HEALTHY", 0, "")}
    assert not states["model-k2"].up and states["model-idle"].up    # scaled to zero is let through
    assert set(states_from_details(details)) == {"model-k2", "model-coder", "model-idle"}
    assert states_from_details({}) == {}
