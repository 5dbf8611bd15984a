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


def test_an_idle_gap_comes_before_every_call_and_is_not_timed():
    starts = []

    async def call():
        starts.append(time.perf_counter())

    began = time.perf_counter()
    timed = timed_handle_calls(call, runs=3, warmup=1, idle_s=0.03)
    assert len(starts) == 4 and len(timed) == 3
    assert starts[0] - began >= 0.03                                  # even before the first
    assert all(b - a >= 0.03 for a, b in zip(starts, starts[1:]))     # and between any two
    assert all(ms < 20 for ms in timed)                               # the gap is not in the timing


def test_the_idle_pattern_row_pauses_before_each_run(monkeypatch):
    from ray import serve
    recorder = _Recorder()
    monkeypatch.setattr(serve, "get_deployment_handle", recorder.handle)
    members = bench_fusion_ray.PANELS[2]
    bench_fusion_ray.bare_pattern("horizon", members, requests=2, idle_s=0.05)
    runs = [recorder.spans[i:i + 4] for i in range(0, len(recorder.spans), 4)]
    assert len(runs) == 5                                             # 3 warm-up runs + 2
    gaps = [later[0][2] - earlier[-1][3] for earlier, later in zip(runs, runs[1:])]
    assert all(g >= 0.05 for g in gaps)


def test_row_names_carry_their_panel_size():
    assert [bench_fusion_ray.panel_size(r) for r in ("panel-3", "pattern-5", "pattern-idle-2")] == [3, 5, 2]


def test_the_fusion_floor_spreads_the_panels_cpu_over_the_cores_then_adds_the_judge_calls():
    from loadtests.fusion_cpu_floor import floor_in_hops

    # Two cores: three 1-ms calls' worth of CPU (3 ms) need 1.5 ms side by side, then 2 judge hops.
    assert floor_in_hops(hop_wall_ms=1.0, judge_wall_ms=1.0, panel_cpu_ms=3.0, cores=2) == 3.5
    # Eight cores: the panel cannot be shorter than one hop, so the floor is the 3.
    assert floor_in_hops(hop_wall_ms=1.0, judge_wall_ms=1.0, panel_cpu_ms=3.0, cores=8) == 3.0
    # A judge call longer than a bare hop (its prompt carries the answers) counts as measured.
    assert floor_in_hops(hop_wall_ms=2.0, judge_wall_ms=2.5, panel_cpu_ms=4.0, cores=2) == 3.5
