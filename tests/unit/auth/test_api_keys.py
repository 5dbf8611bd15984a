"""API keys: 401 / 403 / 429 paths, hashed storage, config validation."""

from __future__ import annotations

import copy
import hashlib
import io
import sys
from pathlib import Path

import pytest

from serve_app.auth import ANONYMOUS, ApiKeyAuthenticator, hash_key
from serve_app.auth.ratelimit import TokenBucket
from serve_app.config.loader import ConfigError, parse_config, read_document
from serve_app.config.access import AuthSettings
from serve_app.errors import AuthenticationError, PermissionDenied, RateLimited

REPO = Path(__file__).resolve().parents[3]
PLAIN_ALICE = "sk-alice-0123456789"
PLAIN_BOB = "sk-bob-abcdefghij"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def settings(**alice_overrides) -> AuthSettings:
    alice = {"name": "alice", "sha256": hashlib.sha256(PLAIN_ALICE.encode()).hexdigest()}
    alice.update(alice_overrides)
    return AuthSettings.model_validate({"enabled": True, "keys": [
        alice, {"name": "bob", "env": "HORIZON_KEY_BOB"}]})


def authenticator(clock=None, **alice_overrides) -> ApiKeyAuthenticator:
    return ApiKeyAuthenticator(settings(**alice_overrides), environ={"HORIZON_KEY_BOB": PLAIN_BOB},
                               clock=clock)


# --------------------------------------------------------------------------- 401


def test_valid_keys_from_hash_and_from_environment_authenticate():
    auth = authenticator()
    assert auth.authenticate(f"Bearer {PLAIN_ALICE}").name == "alice"
    assert auth.authenticate(f"bearer   {PLAIN_BOB} ").name == "bob"


@pytest.mark.parametrize("header", [None, "", "Bearer ", f"Basic {PLAIN_ALICE}", PLAIN_ALICE,
                                    "Bearer sk-wrong", f"Bearer {PLAIN_ALICE}x"])
def test_missing_malformed_or_wrong_key_is_401(header, metrics):
    with pytest.raises(AuthenticationError) as err:
        authenticator().authenticate(header)
    assert err.value.status == 401
    assert err.value.body()["error"]["type"] == "authentication_error"
    assert PLAIN_ALICE not in err.value.message  # never echo a presented key
    assert metrics.value("horizon_auth_rejections", reason="unauthenticated") == 1


@pytest.mark.asyncio
async def test_disabled_auth_lets_everyone_in_as_anonymous():
    auth = ApiKeyAuthenticator(AuthSettings())
    principal = auth.authenticate(None)
    assert principal is ANONYMOUS and principal.anonymous
    auth.authorize(principal, model="k2", decision="anything", fusion=True)
    for _ in range(1000):
        await auth.check_rate(principal)


# --------------------------------------------------------------------------- hashed storage


def test_plain_keys_are_never_kept():
    auth = authenticator()
    state = repr(vars(auth)) + repr(vars(auth._limiter))
    for principal in auth._by_digest.values():
        state += repr(principal)
    assert PLAIN_ALICE not in state and PLAIN_BOB not in state
    assert set(auth._by_digest) == {hash_key(PLAIN_ALICE), hash_key(PLAIN_BOB)}


def test_missing_environment_key_fails_at_startup():
    with pytest.raises(ValueError, match="HORIZON_KEY_BOB"):
        ApiKeyAuthenticator(settings(), environ={})


@pytest.mark.parametrize("blank", ["", "  \n\t"])
def test_a_blank_environment_key_fails_at_startup(blank):
    with pytest.raises(ValueError, match="HORIZON_KEY_BOB is not set or blank"):
        ApiKeyAuthenticator(settings(), environ={"HORIZON_KEY_BOB": blank})


def test_a_key_is_compared_without_its_surrounding_whitespace():
    # A secret made from a file keeps the file's newline; the header's token is stripped, so the
    # key a client can present is the stripped one, and it is the one that matches.
    auth = ApiKeyAuthenticator(settings(), environ={"HORIZON_KEY_BOB": PLAIN_BOB + "\n"})
    assert auth.authenticate(f"Bearer {PLAIN_BOB}").name == "bob"
    assert hash_key(f" {PLAIN_ALICE}\r\n") == hash_key(PLAIN_ALICE)
    assert hash_key(PLAIN_ALICE) == hashlib.sha256(PLAIN_ALICE.encode()).hexdigest()


@pytest.mark.parametrize("stdin", ["\n", "   \n"])
def test_hash_key_command_refuses_a_blank_key(stdin, monkeypatch, capsys):
    from serve_app.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(["hash-key"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no key on stdin" in captured.err


def test_hash_key_command_prints_the_digest(monkeypatch, capsys):
    from serve_app.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(PLAIN_ALICE + "\n"))
    assert main(["hash-key"]) == 0
    assert capsys.readouterr().out.strip() == hashlib.sha256(PLAIN_ALICE.encode()).hexdigest()


# --------------------------------------------------------------------------- 403


def test_model_decision_and_fusion_permissions_are_enforced(metrics):
    auth = authenticator(allowed_models=["qwen-72b", "coder"], allowed_decisions=["chat"],
                         fusion_allowed=False)
    alice = auth.authenticate(f"Bearer {PLAIN_ALICE}")
    auth.authorize(alice, model="qwen-72b", decision="chat", fusion=False)
    auth.authorize(alice, model="coder", decision=None, fusion=False)
    for kwargs in ({"model": "k2", "decision": None, "fusion": False},
                   {"model": None, "decision": "reasoning", "fusion": False},
                   {"model": None, "decision": None, "fusion": True}):
        with pytest.raises(PermissionDenied) as err:
            auth.authorize(alice, **kwargs)
        assert err.value.status == 403 and err.value.body()["error"]["type"] == "permission_error"
    assert metrics.value("horizon_auth_rejections", reason="forbidden") == 3


def test_unrestricted_key_may_use_everything():
    auth = authenticator()
    bob = auth.authenticate(f"Bearer {PLAIN_BOB}")
    auth.authorize(bob, model="k2", decision="fusion_panel", fusion=True)


# --------------------------------------------------------------------------- 429


@pytest.mark.asyncio
async def test_rate_limit_is_a_token_bucket_with_retry_after(metrics):
    clock = Clock()
    auth = authenticator(clock, requests_per_minute=60, burst=3)
    alice = auth.authenticate(f"Bearer {PLAIN_ALICE}")
    for _ in range(3):
        await auth.check_rate(alice)  # the burst
    with pytest.raises(RateLimited) as err:
        await auth.check_rate(alice)
    assert err.value.status == 429
    assert err.value.retry_after == pytest.approx(1.0)
    assert err.value.headers() == {"Retry-After": "1"}
    clock.now += 1.0  # one token refilled (60/min)
    await auth.check_rate(alice)
    with pytest.raises(RateLimited):
        await auth.check_rate(alice)
    assert metrics.value("horizon_auth_rejections", reason="rate_limited") == 2
    # Another key's bucket is independent.
    bob = auth.authenticate(f"Bearer {PLAIN_BOB}")
    await auth.check_rate(bob)


@pytest.mark.asyncio
async def test_burst_defaults_to_a_minute_of_requests(metrics):
    clock = Clock()
    auth = authenticator(clock, requests_per_minute=5)
    alice = auth.authenticate(f"Bearer {PLAIN_ALICE}")
    for _ in range(5):
        await auth.check_rate(alice)
    with pytest.raises(RateLimited) as err:
        await auth.check_rate(alice)
    assert err.value.retry_after == pytest.approx(12.0)


def test_token_bucket_never_exceeds_capacity():
    bucket = TokenBucket(rate_per_s=1.0, capacity=2.0, updated_at=0.0)
    assert bucket.take(1000.0) is None and bucket.take(1000.0) is None
    assert bucket.take(1000.0) == pytest.approx(1.0)


# --------------------------------------------------------------------------- config


SHA = "a" * 64


def profile(auth: dict) -> dict:
    """The simulated fleet profile with this auth section (keeps up with the schema)."""
    args = copy.deepcopy(read_document(REPO / "configs" / "sim.yaml")["applications"][0]["args"])
    args["auth"] = auth
    return args


@pytest.mark.parametrize("auth, path", [
    ({"enabled": True}, "auth.keys"),
    ({"keys": [{"name": "a"}]}, "auth.keys[0]"),
    ({"keys": [{"name": "a", "sha256": SHA, "env": "K"}]}, "auth.keys[0]"),
    ({"keys": [{"name": "a", "sha256": "not-hex"}]}, "auth.keys[0].sha256"),
    ({"keys": [{"name": "a", "sha256": SHA, "plain": "sk-1"}]}, "auth.keys[0].plain"),
    ({"keys": [{"name": "a", "sha256": SHA}, {"name": "a", "env": "K"}]}, "auth.keys"),
    ({"keys": [{"name": "a", "sha256": SHA, "allowed_models": ["qwen-72b", "gpt-5"]}]},
     "auth.keys[0].allowed_models[1]"),
    ({"keys": [{"name": "a", "sha256": SHA, "allowed_decisions": ["nope"]}]},
     "auth.keys[0].allowed_decisions[0]"),
    ({"keys": [{"name": "a", "sha256": SHA, "requests_per_minute": 0}]},
     "auth.keys[0].requests_per_minute"),
    ({"rate_limit_store": "memcached"}, "auth.rate_limit_store"),
    ({"rate_limit_store": "redis", "redis_url": "127.0.0.1:6379"}, "auth.redis_url"),
    ({"redis_key_prefix": ""}, "auth.redis_key_prefix"),
    ({"redis_timeout_s": 0}, "auth.redis_timeout_s"),
    ({"redis_timeout_s": "soon"}, "auth.redis_timeout_s"),
    ({"redis": {"url": "redis://x"}}, "auth.redis"),
])
def test_bad_auth_config_names_the_key_path(auth, path):
    with pytest.raises(ConfigError) as err:
        parse_config(profile(auth))
    assert path in err.value.paths, err.value.errors


def test_uppercase_digest_is_accepted_and_normalised():
    decision = parse_config(profile({})).routing.decisions[0].name
    config = parse_config(profile({"keys": [{"name": "a", "sha256": SHA.upper(),
                                             "allowed_decisions": [decision, "fusion_direct"]}]}))
    assert config.auth.keys[0].sha256 == SHA


def test_rate_limit_store_defaults_to_inprocess_and_shares_the_sessions_redis():
    default = parse_config(profile({}))
    assert default.auth.rate_limit_store == "inprocess"
    assert default.auth.redis_url == default.sessions.redis_url  # filled in at load
    args = profile({"rate_limit_store": "redis"})
    args["sessions"] = {"backend": "redis", "redis_url": "redis://sessions.example:6379/1"}
    assert parse_config(args).auth.redis_url == "redis://sessions.example:6379/1"
    args["auth"]["redis_url"] = "rediss://:pw@limits.example:6380/2"
    config = parse_config(args)
    assert config.auth.redis_url == "rediss://:pw@limits.example:6380/2"
    assert config.sessions.redis_url == "redis://sessions.example:6379/1"


def test_principal_model_and_routing_permissions():
    from serve_app.auth.keys import ANONYMOUS, Principal

    assert ANONYMOUS.may_use_model("k2") and ANONYMOUS.may_route
    p = Principal("p", allowed_models=frozenset({"qwen-72b"}), allowed_decisions=frozenset())
    assert p.may_use_model("qwen-72b") and not p.may_use_model("k2")
    assert not p.may_route, "no decision allowed: auto models cannot serve this key"
