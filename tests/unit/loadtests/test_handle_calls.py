"""The benchmarks' own handle calls: timed on one long-lived event loop (in the fast mode a
handle is bound to the loop that first used it), and the Fusion call pattern without the
gateway (``pattern-N`` in bench_fusion_ray): the panel at once, then the judge twice in turn."""

import asyncio
import threading
import time

from loadtests import bench_fusion_ray
from loadtests.lib.serve_cluster import run_handle_calls, timed_handle_calls


def test_timed_calls_skip_the_warm_up_and_share_one_loop_across_benchmarks():
    loops, threads = [], []

    async def call():
        loops.append(asyncio.get_running_loop())
        threads.append(threading.current_thread().name)
        await asyncio.sleep(0.02)

    first = timed_handle_calls(call, runs=4, warmup=2)
    second = timed_handle_calls(call, runs=1, warmup=0)
    assert len(loops) == 7                      # 2 warm-up + 4 timed, then 1
    assert len(first) == 4 and len(second) == 1
    assert all(ms >= 20 for ms in first + second)
    assert len(set(map(id, loops))) == 1 and set(threads) == {"benchmark-handles"}
    # The loop outlives each call: a handle bound to it keeps receiving the controller's updates.
    assert run_handle_calls(asyncio.sleep(0, result="alive")) == "alive"
    assert loops[0].is_running()


class _Recorder:
    """Stands in for serve.get_deployment_handle: each call sleeps 20 ms and records its span."""

    def __init__(self):
        self.spans: list[tuple[str, str, float, float]] = []

    def handle(self, name: str, app_name: str):
        recorder = self

        class Method:
            def remote(self, body):
                async def call():
                    start = time.perf_counter()
                    await asyncio.sleep(0.02)
                    recorder.spans.append((name, body["messages"][0]["content"], start, time.perf_counter()))
                return call()

        class Handle:
            chat = Method()

        return Handle()


def test_the_pattern_row_calls_the_panel_at_once_then_the_judge_twice(monkeypatch):
    from ray import serve
    recorder = _Recorder()
    monkeypatch.setattr(serve, "get_deployment_handle", recorder.handle)
    members = bench_fusion_ray.PANELS[3]
    runs = bench_fusion_ray.bare_pattern("horizon", members, requests=2)

    assert len(runs) == 2 and all(40 <= ms < 200 for ms in runs)   # 3 stages of 20 ms, not 5 calls
    last_run = recorder.spans[-5:]
    panel, judge = last_run[:3], last_run[3:]
    assert sorted(s[0] for s in panel) == sorted(f"model-{m}" for m in members)
    assert all(s[1] == bench_fusion_ray.PANEL_PROMPT for s in panel)
    assert [s[0] for s in judge] == [f"model-{bench_fusion_ray.JUDGE}"] * 2
    assert all(s[1] == bench_fusion_ray.JUDGE_PROMPT for s in judge)
    assert max(s[2] for s in panel) < min(s[3] for s in panel)      # the panel's calls overlap
    assert judge[0][2] >= max(s[3] for s in panel) and judge[1][2] >= judge[0][3]
