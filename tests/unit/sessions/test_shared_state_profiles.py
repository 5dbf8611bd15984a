"""Several ingress replicas keep sessions and rate limits in Redis: the shipped profiles do, and
a profile that would not is refused at load (so by ``horizon validate``, ``plan`` and ``serve``)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from serve_app.config.loader import ConfigError, horizon_args, load_config, parse_config, read_document
from serve_app.cli import main as horizon

ROOT = Path(__file__).resolve().parents[3]
PROFILES = sorted((ROOT / "configs").glob("*.yaml"))


def _sim_args() -> dict:
    return copy.deepcopy(dict(horizon_args(read_document(ROOT / "configs" / "sim.yaml"))))


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_every_profile_with_several_ingress_replicas_keeps_its_state_in_redis(path):
    cfg = load_config(path)
    if cfg.global_.server.max_replicas > 1:
        assert cfg.sessions.backend == "redis" and cfg.auth.rate_limit_store == "redis"
        # ... and the profile says how to start the Redis it names.
        assert "redis" in path.read_text() and ("scripts/redis.sh" in path.read_text()
                                                or "kubectl" in path.read_text())


def test_inprocess_sessions_beside_a_second_ingress_replica_are_refused():
    args = _sim_args()
    args["sessions"] = {"backend": "inprocess"}
    with pytest.raises(ConfigError) as info:
        parse_config(args)
    assert info.value.paths == ["sessions.backend"]
    assert "scripts/redis.sh start 6399" in str(info.value)
    # Stateless (sessions off) or one replica is fine.
    parse_config({**args, "sessions": {"enabled": False}})
    one = _sim_args()
    one["global"]["server"]["max_replicas"] = 1
    one["sessions"] = {"backend": "inprocess"}
    parse_config(one)


@pytest.mark.parametrize("name", ["X Session", "X-Session:", "", "Sessión"])
def test_a_session_header_name_no_client_could_send_fails_at_load(name):
    args = _sim_args()
    args["sessions"]["header"] = name
    with pytest.raises(ConfigError) as info:
        parse_config(args)
    assert info.value.paths == ["sessions.header"]
    args["sessions"]["header"] = "X-Conversation_ID.v2"
    assert parse_config(args).sessions.header == "X-Conversation_ID.v2"


def test_inprocess_rate_limits_beside_a_second_ingress_replica_are_refused(tmp_path, capsys):
    args = _sim_args()
    key = {"name": "team", "sha256": "0" * 64, "requests_per_minute": 60}
    args["auth"] = {"enabled": True, "rate_limit_store": "inprocess", "keys": [key]}
    with pytest.raises(ConfigError) as info:
        parse_config(args)
    assert info.value.paths == ["auth.rate_limit_store"]
    # Keys without a limit have nothing to share.
    parse_config({**args, "auth": {"enabled": True, "keys": [{"name": "team", "sha256": "0" * 64}]}})
    # horizon validate refuses the profile, naming the key.
    doc = read_document(ROOT / "configs" / "sim.yaml")
    doc["applications"][0]["args"] = args
    import yaml

    path = tmp_path / "two-replicas.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert horizon(["validate", str(path)]) == 1
    assert "auth.rate_limit_store: global.server.max_replicas is 2" in capsys.readouterr().err


def test_horizon_serve_names_a_redis_that_does_not_answer(redis_url):
    from serve_app.tools.serve import redis_notes

    cfg = load_config(ROOT / "configs" / "sim.yaml")
    up = cfg.model_copy(update={"sessions": cfg.sessions.model_copy(update={"redis_url": redis_url})})
    assert redis_notes(up) == []
    down = cfg.model_copy(update={"sessions": cfg.sessions.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})})
    [note] = redis_notes(down)
    assert "redis://127.0.0.1:1/0 (sessions) does not answer" in note
    assert "bash scripts/redis.sh start 1" in note and "/health says so" in note
