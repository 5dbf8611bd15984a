"""The Conversations API (``/v1/conversations`` and its items) and ``conversation`` on
``POST /v1/responses``, read by the official ``openai`` client in process: what the model
receives from a conversation is asserted, as is what each turn adds to it; a key's
conversations are hidden from other keys; concurrent additions all land (in process and on a
real Redis)."""

from __future__ import annotations

import asyncio
import hashlib

import openai
import pytest

from fakes.fleet import FakeModel
from fakes.gateway import gateway_profile, running_gateway
from fakes.responses import completion
from fakes.responses_api import WEATHER, oslo_weather_replies, sdk
from serve_app.sessions.stored_responses import InProcessResponseStore, RedisResponseStore


def test_a_conversation_is_created_read_updated_and_deleted_with_its_items(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, _, _):
        api = sdk(client)
        conv = api.conversations.create(metadata={"topic": "demo"}, items=[
            {"type": "message", "role": "user", "content": "hello"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "hi there"}]}])
        assert conv.id.startswith("conv_") and conv.object == "conversation" and conv.metadata == {"topic": "demo"}
        assert api.conversations.retrieve(conv.id).model_dump() == conv.model_dump()
        assert api.conversations.update(conv.id, metadata={"topic": "other"}).metadata == {"topic": "other"}
        added = api.conversations.items.create(conv.id, items=[{"role": "user", "content": "third"}])
        assert [i.content[0].text for i in added.data] == ["third"] and added.first_id == added.data[0].id
        newest_first = api.conversations.items.list(conv.id)
        # The SDK's auto-pagination follows last_id with ``after``, one item a page.
        oldest_first = list(api.conversations.items.list(conv.id, order="asc", limit=1))
        assert [(i.role, i.content[0].type, i.content[0].text) for i in oldest_first] == [
            ("user", "input_text", "hello"), ("assistant", "output_text", "hi there"), ("user", "input_text", "third")]
        assert [i.id for i in newest_first.data] == [i.id for i in reversed(oldest_first)]
        assert api.conversations.items.retrieve(oldest_first[1].id, conversation_id=conv.id).id == oldest_first[1].id
        after_delete = api.conversations.items.delete(oldest_first[1].id, conversation_id=conv.id)
        assert after_delete.id == conv.id
        assert [i.id for i in api.conversations.items.list(conv.id, order="asc")] == [oldest_first[0].id,
                                                                                     oldest_first[2].id]
        with pytest.raises(openai.NotFoundError) as err:
            api.conversations.items.retrieve(oldest_first[1].id, conversation_id=conv.id)
        assert err.value.body["param"] == "item_id"
        deleted = api.conversations.delete(conv.id)
        assert (deleted.id, deleted.deleted, deleted.object) == (conv.id, True, "conversation.deleted")
        for call in (lambda: api.conversations.retrieve(conv.id), lambda: api.conversations.items.list(conv.id),
                     lambda: api.conversations.delete(conv.id)):
            with pytest.raises(openai.NotFoundError) as err:
                call()
            assert err.value.body["code"] == "conversation_not_found"


def test_a_response_in_a_conversation_reads_it_and_adds_its_turn(tmp_path):
    qwen = FakeModel("qwen-72b", replies=[completion("Hello Ada.", model="qwen-72b"),
                                          completion("Your name is Ada.", model="qwen-72b")])
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        conv = api.conversations.create(items=[{"role": "user", "content": "my name is Ada"}])
        first = api.responses.create(model="qwen-72b", conversation=conv.id, input="hi", instructions="Be brief.")
        assert first.conversation.id == conv.id
        assert qwen.calls[-1]["messages"] == [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "my name is Ada"},
                                              {"role": "user", "content": "hi"}]
        # Streamed, and naming it as an object: the turn lands before the final event.
        with api.responses.stream(model="qwen-72b", conversation={"id": conv.id}, input="who am I?") as stream:
            second = stream.get_final_response()
        assert second.conversation.id == conv.id
        items = list(api.conversations.items.list(conv.id, order="asc"))
        second_inputs = [i.id for i in api.responses.input_items.list(second.id)]
    assert [m["content"] for m in qwen.calls[-1]["messages"]] == ["my name is Ada", "hi", "Hello Ada.", "who am I?"]
    # The conversation holds every turn: its items, each input, each answer (ids as answered).
    assert [(i.role, i.content[0].text) for i in items] == [
        ("user", "my name is Ada"), ("user", "hi"), ("assistant", "Hello Ada."), ("user", "who am I?"),
        ("assistant", second.output_text)]
    assert items[2].id == first.output[0].id and items[4].id == second.output[0].id
    # The stored response lists its input item under the id the conversation gave it.
    assert second_inputs == [items[3].id]


def test_a_tool_call_in_a_conversation_is_continued_with_only_its_output(tmp_path):
    # The Agents SDK's loop with a conversation: the model calls a function, the client sends
    # only the function's output in the same conversation.
    qwen = FakeModel("qwen-72b", replies=oslo_weather_replies("call_7"))
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        conv = api.conversations.create()
        first = api.responses.create(model="qwen-72b", conversation=conv.id, input="weather in Oslo?", tools=[WEATHER],
                                     store=False)
        [call] = first.output
        api.responses.create(model="qwen-72b", conversation=conv.id, tools=[WEATHER], store=False,
                             input=[{"type": "function_call_output", "call_id": call.call_id, "output": "4 C"}])
        types = [i.type for i in api.conversations.items.list(conv.id, order="asc")]
    assert [m["role"] for m in qwen.calls[-1]["messages"]] == ["user", "assistant", "tool"]
    assert qwen.calls[-1]["messages"][1]["tool_calls"][0]["id"] == "call_7"
    # store: false keeps no response, but the conversation still gets the turn (as on OpenAI).
    assert types == ["message", "function_call", "function_call_output", "message"]


@pytest.mark.parametrize("body, param", [
    ({"items": [{"role": "tool", "content": "x"}]}, "items[0].role"),
    ({"items": [{"role": "user", "content": "x"}] * 21}, "items"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    ({"metadata": {"k": 1}}, "metadata.k"),
])
def test_bad_items_or_metadata_are_a_400_naming_them(tmp_path, body, param):
    with running_gateway(tmp_path / "intents") as (client, _, _):
        r = client.post("/v1/conversations", json=body)
        conv = sdk(client).conversations.create()
        added = client.post(f"/v1/conversations/{conv.id}/items", json={"items": body.get("items", [])})
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert added.status_code == 400   # an empty list too


def test_a_conversation_cannot_be_combined_with_another_history_and_must_exist(tmp_path):
    qwen = FakeModel("qwen-72b")
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        conv = api.conversations.create()
        with pytest.raises(openai.NotFoundError) as err:
            api.responses.create(model="qwen-72b", conversation="conv_never", input="hi")
        assert (err.value.body["code"], err.value.body["param"]) == ("conversation_not_found", "conversation")
        session = client.post("/v1/responses", json={"model": "qwen-72b", "input": "hi", "conversation": conv.id},
                              headers={"X-Session-ID": "s-1"})
        assert session.status_code == 400 and session.json()["error"]["param"] == "conversation"
        assert list(api.conversations.items.list(conv.id)) == []
    assert qwen.calls == []


def test_a_keys_conversations_are_invisible_to_other_keys(tmp_path):
    doc = gateway_profile(tmp_path / "intents", auth={"enabled": True, "keys": [
        {"name": name, "sha256": hashlib.sha256(f"sk-{name}".encode()).hexdigest()} for name in ("ann", "bob")]})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, _):
        ann, bob = sdk(client, "sk-ann"), sdk(client, "sk-bob")
        conv = ann.conversations.create(items=[{"role": "user", "content": "a secret"}])
        for call in (lambda: bob.conversations.retrieve(conv.id), lambda: bob.conversations.items.list(conv.id),
                     lambda: bob.conversations.update(conv.id, metadata={"x": "y"}),
                     lambda: bob.conversations.items.create(conv.id, items=[{"role": "user", "content": "hi"}]),
                     lambda: bob.conversations.delete(conv.id),
                     lambda: bob.responses.create(model="qwen-72b", conversation=conv.id, input="tell me")):
            with pytest.raises(openai.NotFoundError):
                call()
        assert [i.content[0].text for i in ann.conversations.items.list(conv.id)] == ["a secret"]
        assert ann.conversations.retrieve(conv.id).metadata == {}


def test_with_store_responses_off_conversations_say_why(tmp_path):
    doc = gateway_profile(tmp_path / "intents", sessions={"store_responses": False})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, _):
        api = sdk(client)
        with pytest.raises(openai.BadRequestError) as err:
            api.conversations.create()
        assert "sessions.store_responses is off" in err.value.body["message"]
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="hi", conversation="conv_1")
        assert (err.value.body["code"], err.value.body["param"]) == ("unsupported_parameter", "conversation")


async def _concurrent_additions(store, conversation_id: str, writers: int) -> list:
    await store.put(conversation_id, {"owner": None, "items": []})

    async def add(i: int) -> None:
        await store.update(conversation_id, lambda record: {**record, "items": [*record["items"], i]})

    await asyncio.gather(*(add(i) for i in range(writers)))
    return (await store.get(conversation_id))["items"]


def test_concurrent_additions_to_one_record_all_land_in_process():
    store = InProcessResponseStore(ttl_s=60, max_bytes=1 << 20)
    assert sorted(asyncio.run(_concurrent_additions(store, "conv_1", 50))) == list(range(50))
    assert asyncio.run(store.update("conv_missing", lambda record: None)) is None
    assert asyncio.run(store.get("conv_missing")) is None


def test_concurrent_additions_to_one_record_all_land_on_redis(redis_url, redis_prefix):
    # Two ingress replicas adding turns to one conversation: WATCH / MULTI retries the loser
    # instead of overwriting the winner's items.
    async def run() -> list:
        writers = [RedisResponseStore(redis_url, key_prefix=redis_prefix, ttl_s=60, timeout_s=2.0) for _ in range(2)]
        try:
            await writers[0].put("conv_1", {"owner": None, "items": []})

            async def add(i: int) -> None:
                await writers[i % 2].update("conv_1", lambda record: {**record, "items": [*record["items"], i]})

            await asyncio.gather(*(add(i) for i in range(40)))
            return (await writers[1].get("conv_1"))["items"]
        finally:
            for writer in writers:
                await writer.aclose()

    assert sorted(asyncio.run(run())) == list(range(40))


def test_conversations_in_redis_are_shared_by_two_gateways(tmp_path, redis_url, redis_prefix):
    sessions = {"backend": "redis", "redis_url": redis_url, "responses_key_prefix": redis_prefix + "r:",
                "conversations_key_prefix": redis_prefix + "c:"}
    doc = gateway_profile(tmp_path / "intents", sessions=sessions)
    one = FakeModel("qwen-72b", completion("first answer", model="qwen-72b"))
    two = FakeModel("qwen-72b", completion("second answer", model="qwen-72b"))
    with running_gateway(tmp_path / "intents", one, doc=doc) as (client_one, _, _), \
            running_gateway(tmp_path / "intents", two, doc=doc) as (client_two, _, _):
        conv = sdk(client_one).conversations.create()
        sdk(client_one).responses.create(model="qwen-72b", input="question one", conversation=conv.id)
        sdk(client_two).responses.create(model="qwen-72b", input="question two", conversation=conv.id)
        texts = [i.content[0].text for i in sdk(client_one).conversations.items.list(conv.id, order="asc")]
    assert [m["content"] for m in two.calls[-1]["messages"]] == ["question one", "first answer", "question two"]
    assert texts == ["question one", "first answer", "question two", "second answer"]
