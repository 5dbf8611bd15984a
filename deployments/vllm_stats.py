"""Engine queue counts of a vLLM replica, for the queue-depth autoscaling policy.

vLLM's scheduler knows how many requests are waiting and running, and hands those counts
(``SchedulerStats``) to every stat logger of the ``AsyncLLM`` after each engine step.
``ray.serve.llm`` builds the ``AsyncLLM`` itself, so a logger cannot be passed in; vLLM's own
extension point for that is the ``vllm.stat_logger_plugins`` entry-point group, which
``pyproject.toml`` registers :class:`SchedulerCountsLogger` in. The logger only keeps the latest
counts in this process (the replica's process: the engine core sends its stats to the
``AsyncLLM`` front end, which lives in the replica).

:class:`deployments.vllm_server.HorizonLLMServer` reads them back in
``record_autoscaling_stats``. This module imports no Ray: vLLM loads it in any engine started
from this environment.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from vllm.v1.metrics.loggers import StatLoggerBase


class EngineCounts(NamedTuple):
    waiting: int
    running: int


_lock = threading.Lock()
# engine index → latest counts. One replica process normally holds one engine (index 0); a
# data-parallel engine reports one entry per rank and the replica's figure is their sum.
_latest: dict[int, EngineCounts] = {}


def record_counts(engine_idx: int, waiting: int, running: int) -> None:
    with _lock:
        _latest[engine_idx] = EngineCounts(waiting, running)


def latest_engine_stats() -> dict[str, Any]:
    """``{"num_requests_waiting", "num_requests_running"}`` summed over this process's engines,
    empty before the first engine step (the policy then estimates rather than reads a zero)."""
    with _lock:
        counts = list(_latest.values())
    if not counts:
        return {}
    return {"num_requests_waiting": sum(c.waiting for c in counts),
            "num_requests_running": sum(c.running for c in counts)}


def reset() -> None:
    with _lock:
        _latest.clear()


class SchedulerCountsLogger(StatLoggerBase):
    """A vLLM stat logger that remembers the scheduler's waiting/running counts."""

    def __init__(self, vllm_config: Any, engine_index: int = 0):
        self.engine_index = engine_index

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        if scheduler_stats is None:
            return
        # Requests deferred by transient constraints are still waiting for this replica.
        waiting = int(getattr(scheduler_stats, "num_waiting_reqs", 0)) + \
            int(getattr(scheduler_stats, "num_skipped_waiting_reqs", 0) or 0)
        record_counts(engine_idx, waiting, int(getattr(scheduler_stats, "num_running_reqs", 0)))

    def log_engine_initialized(self) -> None:
        pass
