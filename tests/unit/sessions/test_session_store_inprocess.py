"""The in-process session store and the prepare/record turn flow (no Redis needed)."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.config.access import SessionSettings
from serve_app.errors import ContextLengthExceeded
from serve_app.sessions import (InProcessSessionStore, RedisSessionStore, SessionStore,
                                answer_message, build_session_store, prepare_turn, record_turn)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def store(clock=None, **overrides):
    params = dict(ttl_s=60.0, max_messages=100, max_buckets=1000)
    params.update(overrides)
    return InProcessSessionStore(clock=clock or Clock(), **params)


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


@pytest.mark.asyncio
async def test_task_types_are_isolated():
    s = store()
    await s.append("s1", "code", [u("fix this"), a("done")])
    await s.append("s1", "chat", [u("hello"), a("hi")])
    assert await s.history("s1", "code") == [u("fix this"), a("done")]
    assert await s.history("s1", "chat") == [u("hello"), a("hi")]
    assert await s.history("s1", "reasoning") == []
    assert await s.history("s2", "code") == []


@pytest.mark.asyncio
async def test_ttl_expires_idle_buckets_and_writes_refresh_it():
    clock = Clock()
    s = store(clock, ttl_s=10)
    await s.append("s", "chat", [u("1")])
    clock.now += 8
    await s.append("s", "chat", [u("2")])  # refreshes the TTL
    clock.now += 8
    assert await s.history("s", "chat") == [u("1"), u("2")]
    clock.now += 3
    assert await s.history("s", "chat") == []


@pytest.mark.asyncio
async def test_bucket_keeps_newest_max_messages_and_evicts_oldest_bucket():
    s = store(max_messages=3, max_buckets=2)
    await s.append("s", "chat", [u(str(i)) for i in range(5)])
    assert await s.history("s", "chat") == [u("2"), u("3"), u("4")]
    await s.append("t", "chat", [u("t")])
    await s.append("v", "chat", [u("v")])
    assert await s.history("s", "chat") == []  # least recently written, evicted
    assert await s.history("v", "chat") == [u("v")]


@pytest.mark.asyncio
async def test_concurrent_appends_lose_nothing():
    s = store(max_messages=1000)
    await asyncio.gather(*(s.append("s", "chat", [u(f"q{i}"), a(f"a{i}")]) for i in range(50)))
    history = await s.history("s", "chat")
    assert len(history) == 100
    # Each turn stays contiguous.
    for i in range(0, 100, 2):
        assert history[i]["content"][1:] == history[i + 1]["content"][1:]


@pytest.mark.asyncio
async def test_history_is_a_copy():
    s = store()
    await s.append("s", "chat", [u("x")])
    got = await s.history("s", "chat")
    got[0]["content"] = "changed"
    assert await s.history("s", "chat") == [u("x")]


@pytest.mark.asyncio
async def test_unknown_task_type_is_a_programming_error():
    with pytest.raises(ValueError):
        await store().history("s", "gossip")


def test_build_session_store_picks_backend():
    assert isinstance(build_session_store(SessionSettings()), InProcessSessionStore)
    redis_store = build_session_store(SessionSettings(backend="redis", redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(redis_store, RedisSessionStore)
    assert isinstance(redis_store, SessionStore) and isinstance(store(), SessionStore)


# --------------------------------------------------------------------------- turn flow


@pytest.mark.asyncio
async def test_turn_flow_forwards_only_its_task_types_history():
    s = store()
    system = {"role": "system", "content": "be brief"}
    code = await prepare_turn(s, "sess", "code", [system, u("write a sort")], prompt_budget=None)
    await record_turn(s, code, answer_message({"choices": [{"message": a("def sort(): ...")}]}))
    chat = await prepare_turn(s, "sess", "chat", [u("how are you?")], prompt_budget=None)
    assert chat.messages == [u("how are you?")]  # no code history leaks into chat
    await record_turn(s, chat, a("fine"))

    code2 = await prepare_turn(s, "sess", "code", [system, u("now in rust")], prompt_budget=None)
    assert code2.messages == [system, u("write a sort"), a("def sort(): ..."), u("now in rust")]
    assert await s.history("sess", "code") == [u("write a sort"), a("def sort(): ...")]


@pytest.mark.asyncio
async def test_stateless_request_and_failed_answer_store_nothing():
    s = store()
    turn = await prepare_turn(s, None, "chat", [u("hi")], prompt_budget=1)
    assert turn.messages == [u("hi")]  # never trimmed or failed for a stateless request
    await record_turn(s, turn, a("hello"))
    failed = await prepare_turn(s, "sess", "chat", [u("hi")], prompt_budget=None)
    await record_turn(s, failed, None)
    assert await s.history("sess", "chat") == []


@pytest.mark.asyncio
async def test_turn_flow_trims_history_to_the_budget():
    s = store()
    await s.append("sess", "chat", [u("old " * 200), a("old answer " * 200)])
    turn = await prepare_turn(s, "sess", "chat", [u("new question")], prompt_budget=100)
    assert turn.messages == [u("new question")]
    with pytest.raises(ContextLengthExceeded):
        await prepare_turn(s, "sess", "chat", [u("x" * 4000)], prompt_budget=100)


def test_answer_message_reads_first_choice():
    assert answer_message({"choices": []}) is None
    assert answer_message({"choices": [{"message": a("x")}]}) == a("x")
