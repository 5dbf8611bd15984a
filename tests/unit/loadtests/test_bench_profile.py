"""The gateway and routing benchmarks' profile: it must become ready on a machine that runs
nothing but the benchmark (no Redis), and keep every model at zero latency."""

from loadtests.bench_gateway import sim_args
from loadtests.bench_routing_http import variant_args
from serve_app.config.loader import load_config, parse_config


def test_the_benchmark_profile_needs_no_redis():
    assert load_config("configs/sim.yaml").sessions.backend == "redis"  # what the profile ships
    cfg = parse_config(sim_args())
    assert not cfg.sessions.enabled
    assert cfg.auth.rate_limit_store == "inprocess"
    assert all(m.simulated.output_tokens == 4 for m in cfg.models if m.backend == "simulated")


def test_the_routing_benchmark_sets_the_encoder_variant():
    [int8] = [m for m in parse_config(variant_args("int8")).models if m.backend == "embedding"]
    [fp32] = [m for m in parse_config(variant_args("fp32")).models if m.backend == "embedding"]
    assert (int8.embedding.quantization, fp32.embedding.quantization) == ("dynamic_int8", "none")


def test_cpu_per_request_groups_processes_by_role():
    from loadtests.cpu_per_request import OTHER_RAY, group_of

    assert group_of("ray::ServeReplica:horizon:ingress") == "horizon: ingress"
    assert group_of("ray::ServeReplica:horizon:model-qwen-72b") == "horizon: model (qwen-72b, simulated)"
    # Any other replica of the gateway's application is background for this benchmark.
    assert group_of("ray::ServeReplica:horizon:model-coder") == "horizon: other models' replicas"
    assert group_of("ray::ServeReplica:bare:zero") == "bare: model (Zero)"
    assert group_of("/usr/sbin/haproxy -f /tmp/ray/haproxy.cfg") == "HAProxy"
    assert group_of("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --x") == "raylet"
    assert group_of("ray::IDLE") == OTHER_RAY
    assert group_of("/usr/bin/python3 -m pytest") is None
