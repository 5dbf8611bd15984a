"""Sessions in real Redis and API keys, over HTTP with the official openai client.

The simulated fleet runs as an application of its own for this module (``/secured``) with auth
on (three keys) and the Redis session store (the test Redis of ``scripts/test.sh``, a key prefix
of its own).
What the model received is read back from the simulated engine's ``usage.prompt_tokens``, which
is its token estimate of exactly the messages forwarded to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import httpx
import openai
import pytest
from openai import OpenAI

pytestmark = pytest.mark.e2e

REDIS_PORT = int(os.environ.get("HORIZON_TEST_REDIS_PORT", "6399"))
PREFIX = f"horizon:e2e:{uuid.uuid4().hex[:8]}:"
FULL_KEY, LIMITED_KEY, BURST_KEY = "sk-e2e-full", "sk-e2e-limited", "sk-e2e-burst"


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def redis_client():
    redis = pytest.importorskip("redis")
    client = redis.Redis(host="127.0.0.1", port=REDIS_PORT, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis on 127.0.0.1:{REDIS_PORT} (scripts/test.sh starts one): {exc}")
    yield client
    for key in client.scan_iter(f"{PREFIX}*"):
        client.delete(key)


@pytest.fixture(scope="module")
def secured(serve_sim, redis_client):
    with serve_sim.variant("secured", {
        "sessions": {"enabled": True, "backend": "redis", "key_prefix": PREFIX, "ttl_s": 3600,
                     "redis_url": f"redis://127.0.0.1:{REDIS_PORT}/0"},
        "auth": {"enabled": True, "keys": [
            {"name": "full", "sha256": _sha(FULL_KEY)},
            {"name": "limited", "sha256": _sha(LIMITED_KEY), "allowed_models": ["qwen-72b"],
             "fusion_allowed": False},
            {"name": "burst", "sha256": _sha(BURST_KEY), "requests_per_minute": 6, "burst": 3},
        ]},
    }) as profile:
        yield profile


def _client(profile, key: str) -> OpenAI:
    return OpenAI(base_url=profile.base_url, api_key=key, max_retries=0, timeout=60)


def _ask(client: OpenAI, text: str, session: str | None, model: str = "vllm-sr/auto"):
    headers = {"X-Session-ID": session} if session else {}
    raw = client.chat.completions.with_raw_response.create(
        model=model, max_tokens=8, messages=[{"role": "user", "content": text}], extra_headers=headers)
    return raw.parse(), raw.headers


def _bucket(redis_client, scope: str, session: str, task: str) -> list[dict]:
    return [json.loads(m) for m in redis_client.lrange(f"{PREFIX}{scope}/{session}:{task}", 0, -1)]


# --------------------------------------------------------------------------- sessions


def test_history_is_kept_per_task_type_and_forwarded_only_to_its_own(secured, redis_client):
    from serve_app.messages.view import estimate_tokens

    client = _client(secured, FULL_KEY)
    session = f"s-{uuid.uuid4().hex[:8]}"
    chat_q, code_q = "hi there!", "Write a Python function that reverses a linked list."

    first, h1 = _ask(client, chat_q, session)
    assert h1["x-vsr-task-type"] == "chat"
    second, h2 = _ask(client, code_q, session)
    assert h2["x-vsr-task-type"] == "code"

    # One Redis list per (session, task type), scoped by the API key, with a TTL.
    chat_bucket = _bucket(redis_client, "full", session, "chat")
    code_bucket = _bucket(redis_client, "full", session, "code")
    assert chat_bucket == [{"role": "user", "content": chat_q},
                           {"role": "assistant", "content": first.choices[0].message.content}]
    assert code_bucket == [{"role": "user", "content": code_q},
                           {"role": "assistant", "content": second.choices[0].message.content}]
    ttl = redis_client.ttl(f"{PREFIX}full/{session}:chat")
    assert 0 < ttl <= 3600

    # The next chat turn carries the chat history and nothing of the code history.
    follow_up = "hello again!"
    third, h3 = _ask(client, follow_up, session)
    assert h3["x-vsr-task-type"] == "chat"
    assert third.usage.prompt_tokens == estimate_tokens([*chat_bucket, {"role": "user", "content": follow_up}])
    stateless, _ = _ask(client, follow_up, None)
    assert stateless.usage.prompt_tokens == estimate_tokens([{"role": "user", "content": follow_up}])
    assert len(_bucket(redis_client, "full", session, "chat")) == 4
    assert len(_bucket(redis_client, "full", session, "code")) == 2


def test_sessions_are_isolated_between_ids_and_api_keys(secured, redis_client):
    from serve_app.messages.view import estimate_tokens

    session = f"s-{uuid.uuid4().hex[:8]}"
    _ask(_client(secured, FULL_KEY), "hi there!", session)
    only = [{"role": "user", "content": "hey you!"}]
    # Another session id under the same key, and the same id under another key: no history.
    other_id, _ = _ask(_client(secured, FULL_KEY), "hey you!", session + "-b")
    assert other_id.usage.prompt_tokens == estimate_tokens(only)
    other_key, _ = _ask(_client(secured, LIMITED_KEY), "hey you!", session, model="qwen-72b")
    assert other_key.usage.prompt_tokens == estimate_tokens(only)
    # Each turn landed in its own key's bucket (qwen-72b's role gives the task type chat).
    assert len(_bucket(redis_client, "limited", session, "chat")) == 2
    assert len(_bucket(redis_client, "full", session, "chat")) == 2
    assert len(_bucket(redis_client, "full", session + "-b", "chat")) == 2


def test_malformed_session_id_is_400(secured):
    r = httpx.post(f"{secured.base_url}/chat/completions", timeout=30,
                   headers={"Authorization": f"Bearer {FULL_KEY}", "X-Session-ID": "bad id with spaces"},
                   json={"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_session_id"


# --------------------------------------------------------------------------- API keys


@pytest.mark.parametrize("key", [None, "sk-wrong"])
def test_missing_or_wrong_key_is_401(secured, key):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    for path, body in (("/chat/completions", {"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]}),
                       ("/route", {"model": "vllm-sr/auto", "messages": [{"role": "user", "content": "hi"}]}),
                       ("/embeddings", {"model": "bge-m3", "input": "hi"})):
        r = httpx.post(f"{secured.base_url}{path}", json=body, headers=headers, timeout=30)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"]["type"] == "authentication_error"
    r = httpx.get(f"{secured.base_url}/models", headers=headers, timeout=30)
    assert r.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        _client(secured, key or "sk-none").chat.completions.create(
            model="qwen-72b", messages=[{"role": "user", "content": "hi"}])


def test_key_outside_its_permissions_is_403(secured):
    client = _client(secured, LIMITED_KEY)
    answer, headers = _ask(client, "hi there!", None, model="qwen-72b")
    assert answer.choices[0].message.content
    with pytest.raises(openai.PermissionDeniedError) as err:
        client.chat.completions.create(model="k2", messages=[{"role": "user", "content": "hi"}])
    assert "may not use model 'k2'" in err.value.message
    with pytest.raises(openai.PermissionDeniedError) as err:
        client.chat.completions.create(model="vllm-sr/fusion",
                                       messages=[{"role": "user", "content": "Prove that 17 is prime."}])
    assert "Fusion" in err.value.message
    # The model list shows what the key may reach.
    ids = {m.id for m in client.models.list().data}
    assert "qwen-72b" in ids and "k2" not in ids and "vllm-sr/fusion" not in ids
    with pytest.raises(openai.PermissionDeniedError):
        client.embeddings.create(model="bge-m3", input="hi")
    # The full key still reaches everything.
    _ask(_client(secured, FULL_KEY), "hi there!", None, model="k2")


def test_over_the_rate_limit_is_429_with_retry_after(secured):
    body = {"model": "qwen-72b", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {BURST_KEY}"}
    statuses = []
    for _ in range(5):
        r = httpx.post(f"{secured.base_url}/chat/completions", json=body, headers=headers, timeout=30)
        statuses.append(r.status_code)
        last = r
    # burst 3, refilling one per 10 s: the first three pass, then 429 with Retry-After.
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429], statuses
    assert last.json()["error"]["type"] == "rate_limit_error"
    assert 1 <= float(last.headers["retry-after"]) <= 10
    # Other keys are unaffected, and the service is up.
    _ask(_client(secured, FULL_KEY), "hi there!", None, model="qwen-72b")
    assert httpx.get(f"{secured.url}/health", timeout=30).status_code == 200
