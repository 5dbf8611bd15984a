"""Profiles without a cluster must fit the machine ``horizon serve`` starts them on."""

import copy

import pytest

from serve_app.capacity.machine import Machine, check_machine
from serve_app.fleet.backends import backend
from serve_app.config.loader import horizon_args, load_config, parse_config, read_document

TWO_CORES = Machine(cpus=2, memory_gb=20)


def local_doc():
    return copy.deepcopy(dict(horizon_args(read_document("configs/local.yaml"))))


@pytest.mark.parametrize("profile", ["configs/local.yaml", "configs/sim.yaml"])
def test_shipped_cpu_profiles_fit_the_documented_two_core_machine(profile):
    fit = check_machine(load_config(profile), TWO_CORES)
    assert fit.errors == []
    assert fit.cpus_at_start <= 2


def test_the_cpu_engine_reserves_its_bundle_only_not_a_second_cpu_for_the_replica():
    cfg = load_config("configs/local.yaml")
    assert backend("vllm").replica_cpus(cfg.model("k2")) == cfg.model("k2").placement.num_cpus == 1


def test_a_deployment_that_cannot_be_scheduled_is_named_with_the_cpus_left():
    doc = local_doc()
    doc["models"][0]["placement"] = {"num_cpus": 2}
    fit = check_machine(parse_config(doc), TWO_CORES)
    [error] = fit.errors
    assert error.model == "model-bge-m3"          # k2 takes both CPUs, the embedder is left out
    assert "0 of this machine's 2" in str(error)


def test_memory_beyond_the_machine_is_refused_naming_the_deployment():
    doc = local_doc()
    doc["models"][0]["placement"] = {"num_cpus": 1, "memory_gb": 30}
    [error] = check_machine(parse_config(doc), TWO_CORES).errors
    assert error.model == "model-k2" and "30.0 GB" in str(error)


def test_custom_resources_this_machine_lacks_are_refused():
    doc = local_doc()
    doc["models"][-1]["placement"] = {"num_cpus": 0.5, "resources": {"node_c": 1}}
    [error] = check_machine(parse_config(doc), TWO_CORES).errors
    assert error.model == "model-bge-m3" and "node_c" in str(error)


def test_gpus_on_a_machine_without_one_are_refused():
    doc = local_doc()
    doc["models"][-1]["placement"] = {"num_cpus": 0.5, "num_gpus": 0.5}
    [error] = check_machine(parse_config(doc), TWO_CORES).errors
    assert error.model == "model-bge-m3" and "GPU" in str(error)


def test_replicas_autoscaling_could_add_beyond_the_machine_are_a_warning():
    doc = local_doc()
    doc["models"][-1]["scaling"] = {"min_replicas": 1, "max_replicas": 4}
    fit = check_machine(parse_config(doc), TWO_CORES)
    assert fit.errors == [] and any("max_replicas" in w for w in fit.warnings)


def test_cpu_vllm_placement_is_what_ray_serve_llm_will_ask_ray_for(monkeypatch):
    """The bundles ray.serve.llm derives from our LLMConfig: one {CPU: num_cpus} bundle, and the
    replica actor adds nothing (the default would add one CPU: two for one engine)."""
    import ray
    from ray.serve.llm import LLMServer

    from serve_app.fleet.backends.vllm import build_llm_config

    class _Ctx:
        runtime_env: dict = {}

    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Ctx())
    cfg = load_config("configs/local.yaml")
    options = LLMServer.get_deployment_options(build_llm_config(cfg.model("k2"), {}))
    cpus = sum(b.get("CPU", 0) for b in options["placement_group_bundles"])
    assert cpus == backend("vllm").replica_cpus(cfg.model("k2")) == 1
    assert options["ray_actor_options"]["num_cpus"] == 0


def test_a_redeploy_surge_that_does_not_fit_is_refused_naming_the_key():
    doc = local_doc()
    doc["models"][0]["scaling"]["max_surge_percent"] = 100   # a second 1-CPU engine: 2.5 of 2
    [error] = check_machine(parse_config(doc), TWO_CORES).errors
    assert error.model == "model-k2"
    assert "models[0].scaling.max_surge_percent" in str(error) and "logical CPUs" in str(error)


def test_the_shipped_cpu_profile_surges_its_embedder_and_ingress_only():
    fit = check_machine(load_config("configs/local.yaml"), TWO_CORES)
    assert {n.name: n.surge for n in fit.needs} == {"ingress": 1, "model-k2": 0, "model-bge-m3": 1}


def test_a_surge_counts_every_replica_it_starts_beside_the_old_ones():
    # Serve rolls every deployment of the application at once, and the surge replicas start
    # beside the old ones: two embedders of 0.3 CPU next to the 1-CPU engine leave 0.4 free,
    # one more fits, two more do not.
    doc = local_doc()
    doc["models"][-1]["placement"] = {"num_cpus": 0.3}
    doc["models"][-1]["scaling"] = {"min_replicas": 2, "max_replicas": 2, "max_surge_percent": 100}
    [error] = check_machine(parse_config(doc), TWO_CORES).errors
    assert error.model == "model-bge-m3" and "2 more replica(s)" in str(error)
    doc["models"][-1]["scaling"]["max_surge_percent"] = 50      # one at a time: 0.3 CPU
    assert check_machine(parse_config(doc), TWO_CORES).errors == []


def test_a_cpu_engine_without_a_cache_size_is_counted_at_its_share_of_the_machine():
    # vLLM 0.32 on CPU, given no kv_cache_memory_bytes (nor VLLM_CPU_KVCACHE_SPACE), reserves
    # gpu_memory_utilization of the machine's whole memory and refuses to start when that much
    # is not free: on the 2-core machine "Available memory (20.87/23.59 GiB) on startup is less
    # than desired CPU memory utilization (0.9, 21.23 GiB)", three times, while validate said
    # it fitted with "about 9.3 GB".
    doc = local_doc()
    del doc["models"][0]["engine"]["engine_kwargs"]["kv_cache_memory_bytes"]
    machine = Machine(cpus=2, memory_gb=20, total_memory_gb=24)
    [error] = check_machine(parse_config(doc), machine).errors
    assert error.model == "model-k2" and "21.6 GB per replica" in str(error)
    assert "models[0]: on CPU, vLLM reserves engine.gpu_memory_utilization (0.9)" in str(error)
    assert "set engine.engine_kwargs.kv_cache_memory_bytes" in str(error)
    doc["models"][0]["engine"]["gpu_memory_utilization"] = 0.25
    fit = check_machine(parse_config(doc), machine)
    assert fit.errors == [] and {n.name: n.memory_gb for n in fit.needs}["model-k2"] == pytest.approx(6.0)


def test_the_shipped_cpu_engine_counts_its_fixed_cache():
    k2 = load_config("configs/local.yaml").model("k2")
    vllm = backend("vllm")
    assert vllm.kv_cache_bytes(k2) == 335_544_320
    assert vllm.replica_memory_gb(k2, 24) == pytest.approx(vllm.default_memory_gb + 0.335544320)
    assert vllm.memory_note(k2) == ""


def test_vllms_cpu_cache_variable_wins_over_kv_cache_memory_bytes_as_in_vllm():
    doc = local_doc()
    doc["models"][0]["engine"]["env"] = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    k2 = parse_config(doc).model("k2")
    assert backend("vllm").kv_cache_bytes(k2) == 2 * 1024 ** 3
    assert backend("vllm").replica_memory_gb(k2, 24) == pytest.approx(
        backend("vllm").default_memory_gb + 2 * 1024 ** 3 / 1e9)


@pytest.mark.parametrize("where, value, key", [
    ("engine_kwargs", "320MiB", "engine.engine_kwargs.kv_cache_memory_bytes"),
    ("engine_kwargs", 0, "engine.engine_kwargs.kv_cache_memory_bytes"),
    ("engine_kwargs", True, "engine.engine_kwargs.kv_cache_memory_bytes"),
    ("engine_kwargs", 3.5e8, "engine.engine_kwargs.kv_cache_memory_bytes"),
    ("env", "4GB", "engine.env.VLLM_CPU_KVCACHE_SPACE"),
])
def test_a_cache_size_that_is_not_one_fails_at_load_naming_the_key(tmp_path, where, value, key):
    import yaml

    from serve_app.config.loader import ConfigError
    from serve_app.tools.serve_config import load_serve_profile

    document = read_document("configs/local.yaml")
    engine = horizon_args(document)["models"][0]["engine"]
    name = "kv_cache_memory_bytes" if where == "engine_kwargs" else "VLLM_CPU_KVCACHE_SPACE"
    engine.setdefault(where, {})[name] = value
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_serve_profile(str(path))
    assert err.value.paths == [f"models[0].{key}"]
