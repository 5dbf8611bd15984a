"""The ingress process's collector settings (serve_app.serving.process): applied as configured,
and the profile key validated at load."""

import gc

import pytest

from serve_app.config.loader import ConfigError, parse_config
from serve_app.serving.process import freeze_startup_heap, tune_collector


@pytest.fixture
def restored_collector():
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_the_first_generation_threshold_is_raised_and_the_others_kept(restored_collector):
    gc.set_threshold(700, 10, 10)
    tune_collector(10_000)
    assert gc.get_threshold() == (10_000, 10, 10)
    tune_collector(None)  # None keeps whatever is set
    assert gc.get_threshold() == (10_000, 10, 10)


def test_freezing_moves_the_live_heap_out_of_the_collectors_reach(restored_collector):
    built_at_start = [{"n": i} for i in range(1000)]
    frozen = freeze_startup_heap()
    # Frozen objects that die later leave the count (other threads run meanwhile), while the
    # ones still referenced here stay in it.
    assert frozen >= len(built_at_start) and gc.get_freeze_count() >= len(built_at_start)
    # Only the cyclic collector ignores frozen objects: a collection still frees new cycles.
    cycle: list = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1


def test_the_settings_default_to_tuned_and_reject_a_tiny_threshold(tmp_path):
    from fakes.gateway import gateway_profile

    doc = gateway_profile(tmp_path / "intents")
    server = parse_config(doc).global_.server
    assert (server.gc_gen0_threshold, server.gc_freeze_after_start) == (10_000, True)
    doc.setdefault("global", {}).setdefault("server", {})["gc_gen0_threshold"] = 5
    with pytest.raises(ConfigError, match="gc_gen0_threshold"):
        parse_config(doc)
