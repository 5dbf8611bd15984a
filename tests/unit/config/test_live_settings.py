"""Live settings (serve_app.config.live): the ingress's ``user_config`` merged into the profile."""

from __future__ import annotations

import pytest

from fakes.routing import profile
from serve_app.config.live import live_config, merge_settings
from serve_app.config.loader import ConfigError

SOURCE = "horizon-ingress user_config"


def test_mappings_merge_key_by_key_and_lists_replace():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    merged = merge_settings(base, {"a": {"c": [3]}, "e": 2})
    assert merged == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


def test_an_override_changes_one_setting_and_keeps_the_rest():
    args = profile()
    cfg = live_config(args, {"routing": {"signals": {"short_text": {"max_chars": 5}}}}, SOURCE)
    assert cfg.routing.signals.short_text.max_chars == 5
    assert cfg.routing.default_decision == "general_chat"
    assert [d.name for d in cfg.routing.decisions] == [d["name"] for d in args["routing"]["decisions"]]
    assert live_config(args, None, SOURCE).routing.signals.short_text.max_chars == 20


def test_a_section_other_than_routing_is_refused_naming_it():
    with pytest.raises(ConfigError) as err:
        live_config(profile(), {"routing": {}, "resilience": {"max_fallback_depth": 0}}, SOURCE)
    assert err.value.paths == ["resilience"]
    assert "without a restart" in str(err.value) and SOURCE in str(err.value)


def test_the_merged_profile_is_validated_whole_naming_the_key():
    with pytest.raises(ConfigError) as err:
        live_config(profile(), {"routing": {"default_decision": "no-such-decision"}}, SOURCE)
    assert err.value.errors == [("routing", "default_decision 'no-such-decision' is not a decision name")]
    with pytest.raises(ConfigError) as err:
        live_config(profile(), {"routing": {"signals": {"short_text": {"max_chars": -1}}}}, SOURCE)
    assert err.value.paths == ["routing.signals.short_text.max_chars"]


def test_overrides_that_are_not_a_mapping_are_refused():
    with pytest.raises(ConfigError) as err:
        live_config(profile(), ["routing"], SOURCE)
    assert "expected a mapping" in str(err.value)


def test_serves_replica_context_still_carries_the_starting_user_config():
    """The ingress's constructor reads its starting live settings from Serve's replica context
    (serve_app.app._starting_user_config), a private field: this fails when Ray moves it (the
    ingress would still apply them, at its first reconfigure, starting its routing twice)."""
    import dataclasses

    from ray.serve._private.config import DeploymentConfig
    from ray.serve.context import ReplicaContext

    assert "_deployment_config" in {f.name for f in dataclasses.fields(ReplicaContext)}
    assert DeploymentConfig(user_config={"routing": {}}).user_config == {"routing": {}}


def test_a_profile_file_serves_its_args_with_the_ingress_live_settings(tmp_path):
    """The offline tools (horizon route, calibration, training, smoke, plan) load this."""
    import yaml

    from serve_app.config.loader import load_config

    document = {"applications": [{"name": "horizon", "import_path": "serve_app.app:build_app",
                                  "args": profile(),
                                  "deployments": [{"name": "ingress", "user_config": {
                                      "routing": {"signals": {"short_text": {"max_chars": 5}}}}}]}]}
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(document))
    assert load_config(path).routing.signals.short_text.max_chars == 5
    document["applications"][0]["deployments"] = [{"name": "model-k2", "health_check_period_s": 5}]
    path.write_text(yaml.safe_dump(document))
    assert load_config(path).routing.signals.short_text.max_chars == 20
    document["applications"][0]["deployments"] = [{"name": "ingress", "user_config": {"auth": {}}}]
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.paths == ["auth"] and "applications[0].deployments[0].user_config" in str(err.value)
