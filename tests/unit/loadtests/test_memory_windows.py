"""The memory soak's slope per window: growth that levels off must show a flat last window."""

from __future__ import annotations

import pytest

from loadtests.bench_memory import GROUPS, window_slopes


def _samples(pss_at, seconds=1800, every=15):
    out = []
    for t in range(0, seconds + 1, every):
        groups = {g: {"pss_mib": 0.0} for g in GROUPS}
        groups["ingress"] = {"pss_mib": pss_at(t)}
        out.append({"elapsed_s": float(t), "total_pss_mib": 1000.0 + pss_at(t), "groups": groups})
    return out


def test_growth_that_levels_off_has_a_flat_last_window():
    # +1 MiB a minute for ten minutes, then flat.
    samples = _samples(lambda t: min(t, 600) / 60.0)
    windows = window_slopes(samples, 600)
    assert [w["start_s"] for w in windows] == [0.0, 600.0, 1200.0]  # neighbours share their boundary sample
    assert windows[0]["pss_slope_mib_per_min"] == 1.0
    assert windows[0]["group_pss_slope_mib_per_min"]["ingress"] == 1.0
    assert windows[-1]["pss_slope_mib_per_min"] == 0.0
    assert windows[-1]["group_pss_slope_mib_per_min"]["ingress"] == 0.0


def test_steady_growth_shows_in_every_window():
    windows = window_slopes(_samples(lambda t: t / 30.0), 600)
    assert len(windows) == 3
    assert all(w["pss_slope_mib_per_min"] == 2.0 for w in windows)


def test_a_short_tail_is_left_out():
    # 700 s of samples: one full window, then a 100 s tail (under half a window).
    windows = window_slopes(_samples(lambda t: 0.0, seconds=700), 600)
    assert len(windows) == 1 and windows[0]["end_s"] == 600.0


def test_a_groups_growth_is_traced_to_its_process():
    from loadtests.bench_memory import compact_members, process_names

    raw = []
    for t in range(0, 601, 15):
        groups = {g: {"processes": 0, "pss_mib": 0.0, "uss_mib": 0.0, "members": []} for g in GROUPS}
        growing, flat = 100.0 + t / 60.0, 50.0
        groups["vllm-k2"] = {"processes": 2, "pss_mib": growing + flat, "uss_mib": 0.0, "members": [
            {"pid": 11, "cmd": "VLLM::EngineCore", "pss_mib": growing},
            {"pid": 12, "cmd": "ray::ServeReplica:horizon:model-k2", "pss_mib": flat}]}
        raw.append({"elapsed_s": float(t), "total_pss_mib": growing + flat, "groups": groups})
    samples = [compact_members(s) for s in raw]
    assert "members" not in samples[0]["groups"]["vllm-k2"]
    assert process_names(raw) == {"11": "VLLM::EngineCore", "12": "ray::ServeReplica:horizon:model-k2"}
    [window] = window_slopes(samples, 600)
    assert window["group_pss_slope_mib_per_min"]["vllm-k2"] == 1.0
    assert window["process_pss_slope_mib_per_min"] == {"11": 1.0}  # the flat one is left out


def test_env_pairs_are_set_over_the_environment_and_malformed_ones_refused():
    from loadtests.bench_memory import cluster_env

    base = {"PATH": "/bin", "MALLOC_ARENA_MAX": "8"}
    env = cluster_env(base, ["MALLOC_ARENA_MAX=2", "MALLOC_TRIM_THRESHOLD_=131072", "EMPTY="])
    assert env == {"PATH": "/bin", "MALLOC_ARENA_MAX": "2", "MALLOC_TRIM_THRESHOLD_": "131072", "EMPTY": ""}
    assert base["MALLOC_ARENA_MAX"] == "8"  # the benchmark's own environment is left alone
    for bad in ("MALLOC_ARENA_MAX", "=2"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            cluster_env(base, [bad])


def test_the_in_process_probe_slopes_memory_per_thousand_requests():
    from loadtests.probe_vllm_memory import slope_per_1000

    assert slope_per_1000([(0, 100.0), (500, 101.0), (1000, 102.0)]) == pytest.approx(2.0)
    assert slope_per_1000([(0, 100.0), (500, 100.0), (1000, 100.0)]) == 0.0
    assert slope_per_1000([(0, 100.0)]) == 0.0


def test_idle_cpu_is_split_by_group_in_percent_of_one_core():
    from loadtests.bench_memory import cpu_by_group

    hz = 100.0
    before = {10: 1000, 11: 50, 12: 7, 99: 0}
    # Over 20 s: pid 10 used 2 s (10 % of a core), pid 11 0.5 s, pid 12 nothing; pid 13 started
    # meanwhile and pid 99 is not ours: neither counts.
    after = {10: 1200, 11: 100, 12: 7, 13: 500, 99: 900}
    groups_of = {10: "serve-control", 11: "ingress", 12: "ingress", 13: "ingress"}
    cpu = cpu_by_group(before, after, groups_of, {10: "ray::ServeController", 11: "ray::ServeReplica:a:ingress"},
                       20.0, hz)
    assert cpu["groups"]["serve-control"] == 10.0
    assert cpu["groups"]["ingress"] == 2.5
    assert cpu["groups"]["vllm-k2"] == 0.0
    assert cpu["total_pct_of_core"] == 12.5
    assert [r["pid"] for r in cpu["top_processes"]] == [10, 11]  # busiest first, idle ones left out
    assert cpu["top_processes"][0]["cmd"] == "ray::ServeController"


def test_machine_busy_ticks_reads_proc_stat():
    from loadtests.bench_memory import machine_busy_ticks

    first = machine_busy_ticks()
    sum(i * i for i in range(200_000))  # some CPU
    assert machine_busy_ticks() >= first > 0
