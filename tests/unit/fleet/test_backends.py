"""Every backend the profiles may name is registered, and each answers the facts callers ask."""

from serve_app.config.base import BACKENDS
from serve_app.config.loader import load_config
from serve_app.fleet.backends import backend, registered


def test_the_registry_is_the_config_vocabulary():
    assert set(registered()) == set(BACKENDS)
    assert all(backend(kind).kind == kind for kind in BACKENDS)


def test_engines_that_honour_response_format_say_so():
    # vLLM decodes under the grammar; the simulated engine answers schema-valid JSON like it.
    assert backend("vllm").constrains_decoding and backend("simulated").constrains_decoding
    assert not backend("embedding").constrains_decoding


def test_stand_in_engines_reserve_the_workers_of_the_engine_they_replace():
    fleet = load_config("configs/fleet.yaml")
    k2 = fleet.model("k2")
    assert backend("vllm").workers(k2) == k2.engine.tensor_parallel_size == 8
    assert backend("simulated").workers(k2) == 8
    assert backend("embedding").workers(fleet.model("bge-m3")) == 1


def test_engine_slots_come_from_the_simulated_section_or_the_engine():
    sim = load_config("configs/sim.yaml")
    k2 = sim.model("k2")
    assert backend("simulated").engine_slots(k2) == k2.simulated.max_num_seqs
