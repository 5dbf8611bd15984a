"""vLLM replicas report their scheduler's waiting/running counts to the autoscaler."""

from __future__ import annotations

import asyncio
from importlib.metadata import entry_points

import pytest

from deployments import vllm_stats
from serve_app.autoscaling.signals import ENGINE_RUNNING, ENGINE_WAITING


@pytest.fixture(autouse=True)
def _clean():
    vllm_stats.reset()
    yield
    vllm_stats.reset()


def _scheduler_stats(waiting: int, running: int, skipped: int = 0):
    from vllm.v1.metrics.stats import SchedulerStats

    return SchedulerStats(num_running_reqs=running, num_waiting_reqs=waiting,
                          num_skipped_waiting_reqs=skipped)


def test_logger_keeps_the_latest_counts_per_engine_and_sums_them():
    logger = vllm_stats.SchedulerCountsLogger(vllm_config=None, engine_index=0)
    assert vllm_stats.latest_engine_stats() == {}, "nothing before the first engine step"
    logger.record(_scheduler_stats(waiting=5, running=16), None, engine_idx=0)
    logger.record(_scheduler_stats(waiting=2, running=16, skipped=1), None, engine_idx=0)
    logger.record(None, None, engine_idx=0)  # an iteration without scheduler stats changes nothing
    logger.record(_scheduler_stats(waiting=1, running=4), None, engine_idx=1)
    assert vllm_stats.latest_engine_stats() == {"num_requests_waiting": 4, "num_requests_running": 20}


def test_server_reports_engine_counts_as_autoscaling_metrics():
    from deployments.vllm_server import HorizonLLMServer

    vllm_stats.SchedulerCountsLogger(None).record(_scheduler_stats(waiting=3, running=8), None)
    # record_autoscaling_stats reads the process's counts, not the engine: a bare instance does.
    # Outside a Serve replica there is no gateway demand board to relay.
    server = object.__new__(HorizonLLMServer)
    assert asyncio.run(server.record_autoscaling_stats()) == {ENGINE_WAITING: 3.0, ENGINE_RUNNING: 8.0}


def test_no_counts_means_no_metric_rather_than_zero():
    from deployments.vllm_server import HorizonLLMServer

    assert asyncio.run(object.__new__(HorizonLLMServer).record_autoscaling_stats()) == {}


def test_vllm_loads_the_logger_through_its_plugin_group():
    from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

    group = entry_points(group="vllm.stat_logger_plugins")
    assert "deployments.vllm_stats:SchedulerCountsLogger" in {e.value for e in group}
    assert vllm_stats.SchedulerCountsLogger in load_stat_logger_plugin_factories()


def test_vllm_deployments_use_the_reporting_server_class():
    from serve_app.fleet.backends.vllm import build_llm_config
    from deployments.vllm_server import HorizonLLMServer
    from serve_app.config.loader import horizon_args, parse_config, read_document

    cfg = parse_config(dict(horizon_args(read_document("configs/local.yaml"))))
    assert build_llm_config(cfg.model("k2"), {}).server_cls is HorizonLLMServer
