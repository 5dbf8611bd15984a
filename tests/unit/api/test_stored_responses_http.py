"""Stored responses over ``/v1/responses``, read by the official ``openai`` client in process:
``store`` (OpenAI's default true), ``previous_response_id`` continuing a stored conversation
(what the model then receives is asserted), ``GET`` / ``DELETE /v1/responses/{id}``, a key's
responses hidden from other keys, and the profile's switch (``sessions.store_responses``)."""

from __future__ import annotations

import hashlib
import json

import openai
import pytest

from fakes.fleet import FakeModel
from fakes.gateway import gateway_profile, running_gateway
from fakes.responses import completion, tool_call
from fakes.responses_api import WEATHER, oslo_weather_replies, sdk


def test_a_response_is_stored_retrieved_continued_and_deleted(tmp_path):
    qwen = FakeModel("qwen-72b", replies=[completion("Hello Ada.", model="qwen-72b"),
                                          completion("Your name is Ada.", model="qwen-72b")])
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        first = api.responses.create(model="qwen-72b", input="my name is Ada", instructions="Be brief.")
        assert first.store is True and first.previous_response_id is None
        assert api.responses.retrieve(first.id).model_dump() == first.model_dump()
        second = api.responses.create(model="qwen-72b", input="what is my name?", previous_response_id=first.id,
                                      instructions="Answer in French.")
        # The stored turn after this request's own instructions; the first request's are not carried over.
        assert qwen.calls[-1]["messages"] == [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "my name is Ada"},
            {"role": "assistant", "content": "Hello Ada."},
            {"role": "user", "content": "what is my name?"}]
        assert second.previous_response_id == first.id and second.output_text == "Your name is Ada."
        assert api.responses.delete(first.id) is None   # the SDK returns nothing for a 200
        with pytest.raises(openai.NotFoundError) as err:
            api.responses.retrieve(first.id)
        assert err.value.body["code"] == "response_not_found"
        deleted = client.delete(f"/v1/responses/{first.id}")
        assert deleted.status_code == 404 and deleted.json()["error"]["param"] == "response_id"
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="again?", previous_response_id=first.id)
        assert (err.value.body["code"], err.value.body["param"]) == ("previous_response_not_found",
                                                                     "previous_response_id")
        # The second response's conversation began with the deleted one: deleted means gone,
        # so it cannot be continued either.
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="and again?", previous_response_id=second.id)
        assert err.value.body["code"] == "previous_response_not_found" and first.id in err.value.body["message"]
    assert len(qwen.calls) == 2


def test_a_chain_is_stored_turn_by_turn_and_read_whole(tmp_path):
    qwen = FakeModel("qwen-72b", replies=[completion(f"answer {i}", model="qwen-72b") for i in range(4)])
    with running_gateway(tmp_path / "intents", qwen) as (client, gateway, _):
        api = sdk(client)
        ids = [api.responses.create(model="qwen-72b", input="question 0").id]
        for i in range(1, 4):
            ids.append(api.responses.create(model="qwen-72b", input=f"question {i}", previous_response_id=ids[-1]).id)
        records = client.portal.call(gateway.response_store.get_many, ids)
    assert [m["content"] for m in qwen.calls[-1]["messages"]] == [
        "question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2", "question 3"]
    # Each record holds its own turn (its input items and its response) and where it sits, not a
    # copy of everything before it, and nothing twice.
    assert [sorted(r) for r in records] == [["ancestors", "input_items", "owner", "response"]] * 4
    assert [[item["content"] for item in r["input_items"]] for r in records] == [[f"question {i}"] for i in range(4)]
    assert [r["response"]["output"][0]["content"][0]["text"] for r in records] == [f"answer {i}" for i in range(4)]
    assert [r["ancestors"] for r in records] == [ids[:i] for i in range(4)]


def test_a_delete_answers_openais_deletion_object(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, _, _):
        first = sdk(client).responses.create(model="qwen-72b", input="hi")
        r = client.delete(f"/v1/responses/{first.id}")
    assert r.status_code == 200 and r.json() == {"id": first.id, "object": "response", "deleted": True}


def test_a_streamed_response_is_stored_before_its_last_event_and_continues(tmp_path):
    qwen = FakeModel("qwen-72b", tokens=3)
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        with api.responses.stream(model="qwen-72b", input="count") as stream:
            final = stream.get_final_response()
        assert final.store is True
        assert api.responses.retrieve(final.id).output_text == "t0 t1 t2 "
        with api.responses.stream(model="qwen-72b", input="more", previous_response_id=final.id) as stream:
            again = stream.get_final_response()
    assert qwen.calls[-1]["messages"] == [{"role": "user", "content": "count"},
                                          {"role": "assistant", "content": "t0 t1 t2 "},
                                          {"role": "user", "content": "more"}]
    assert again.previous_response_id == final.id


def test_a_tool_call_is_continued_with_only_its_output(tmp_path):
    # The agent loop of OpenAI's docs: the model calls a function, the client sends only the
    # function's output with previous_response_id.
    qwen = FakeModel("qwen-72b", replies=oslo_weather_replies("call_3"))
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        first = api.responses.create(model="qwen-72b", input="weather in Oslo?", tools=[WEATHER])
        [call] = first.output
        second = api.responses.create(model="qwen-72b", previous_response_id=first.id, tools=[WEATHER],
                                      input=[{"type": "function_call_output", "call_id": call.call_id,
                                              "output": "4 C"}])
    assert qwen.calls[-1]["messages"] == [
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_3", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}}]},
        {"role": "tool", "tool_call_id": "call_3", "content": "4 C"}]
    assert second.output_text == "It is 4 C in Oslo."


def test_a_stored_answer_is_replayed_as_one_assistant_message_without_its_reasoning(tmp_path):
    # The stored response is the record of the answer: its output items become the chat
    # message the model sees next time (text and calls in one message, reasoning left out).
    qwen = FakeModel("qwen-72b", replies=[
        completion("Checking both.", model="qwen-72b", reasoning="two cities, two calls", finish_reason="tool_calls",
                   tool_calls=[tool_call("get_weather", {"city": "Oslo"}, "call_a"),
                               tool_call("get_weather", {"city": "Rome"}, "call_b")]),
        completion("Cold and warm.", model="qwen-72b")])
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        first = api.responses.create(model="qwen-72b", input="weather in Oslo and Rome?", tools=[WEATHER])
        assert [i.type for i in first.output] == ["reasoning", "message", "function_call", "function_call"]
        api.responses.create(model="qwen-72b", previous_response_id=first.id, tools=[WEATHER], input=[
            {"type": "function_call_output", "call_id": "call_a", "output": "cold"},
            {"type": "function_call_output", "call_id": "call_b", "output": "warm"}])
    [user, assistant, *tools] = qwen.calls[-1]["messages"]
    assert user == {"role": "user", "content": "weather in Oslo and Rome?"}
    assert assistant["content"] == "Checking both." and "reasoning_content" not in assistant
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert tools == [{"role": "tool", "tool_call_id": "call_a", "content": "cold"},
                     {"role": "tool", "tool_call_id": "call_b", "content": "warm"}]


def test_a_continued_refusal_is_replayed_once(tmp_path):
    # The gateway's refusal carries its words as text and as a refusal part: the model is told
    # them once.
    qwen = FakeModel("qwen-72b", completion("Here is a joke.", model="qwen-72b"))
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        refused = api.responses.create(model="vllm-sr/auto", input="how to build a bomb weapon")
        assert [p.type for p in refused.output[0].content] == ["output_text", "refusal"]
        api.responses.create(model="qwen-72b", input="tell me a joke instead", previous_response_id=refused.id)
    assert qwen.calls[-1]["messages"] == [{"role": "user", "content": "how to build a bomb weapon"},
                                          {"role": "assistant", "content": refused.output_text},
                                          {"role": "user", "content": "tell me a joke instead"}]


def test_cancelling_a_stored_response_is_a_400_and_an_unknown_one_a_404(tmp_path):
    # OpenAI cancels background responses only; the gateway runs none.
    with running_gateway(tmp_path / "intents") as (client, _, _):
        api = sdk(client)
        r = api.responses.create(model="qwen-72b", input="hi")
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.cancel(r.id)
        assert err.value.body["param"] == "response_id" and "background" in err.value.body["message"]
        with pytest.raises(openai.NotFoundError) as err:
            api.responses.cancel("resp_never")
        assert err.value.body["code"] == "response_not_found"
        assert api.responses.retrieve(r.id).output_text == r.output_text   # still there


def test_store_false_keeps_nothing(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        api = sdk(client)
        r = api.responses.create(model="qwen-72b", input="hi", store=False)
        assert r.store is False
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(r.id)
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="again", previous_response_id=r.id)
    assert err.value.body["code"] == "previous_response_not_found"
    assert fleet.calls()["qwen-72b"] == 1     # refused before any model was called


def test_a_keys_responses_are_invisible_to_other_keys(tmp_path):
    doc = gateway_profile(tmp_path / "intents", auth={"enabled": True, "keys": [
        {"name": name, "sha256": hashlib.sha256(f"sk-{name}".encode()).hexdigest()} for name in ("ann", "bob")]})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, _):
        ann, bob = sdk(client, "sk-ann"), sdk(client, "sk-bob")
        r = ann.responses.create(model="qwen-72b", input="a secret")
        assert ann.responses.retrieve(r.id).id == r.id
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(r.id)
        with pytest.raises(openai.BadRequestError) as err:
            bob.responses.create(model="qwen-72b", input="tell me", previous_response_id=r.id)
        assert err.value.body["code"] == "previous_response_not_found"
        assert client.delete(f"/v1/responses/{r.id}", headers={"authorization": "Bearer sk-bob"}).status_code == 404
        assert ann.responses.retrieve(r.id).id == r.id    # bob's delete did not delete it


def test_a_continuation_with_a_session_header_is_a_400(tmp_path):
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        api = sdk(client)
        first = api.responses.create(model="qwen-72b", input="hi")
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="again", previous_response_id=first.id,
                                 extra_headers={"X-Session-ID": "s1"})
    assert err.value.body["param"] == "previous_response_id" and "X-Session-ID" in err.value.body["message"]
    assert fleet.calls()["qwen-72b"] == 1


def test_an_error_in_a_continuation_names_the_input_item_after_the_stored_turns(tmp_path):
    # The chat path sees the stored turn's two messages first: its messages[2] is input[0].
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        first = sdk(client).responses.create(model="qwen-72b", input="hi")
        r = client.post("/v1/responses", json={"model": "qwen-72b", "previous_response_id": first.id,
                                               "input": [{"role": "assistant", "content": [
                                                   {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].content[0].image_url", r.text
    assert fleet.calls()["qwen-72b"] == 1


def test_with_store_responses_off_nothing_is_stored_and_continuing_says_why(tmp_path):
    doc = gateway_profile(tmp_path / "intents", sessions={"store_responses": False})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, _):
        api = sdk(client)
        r = api.responses.create(model="qwen-72b", input="hi")
        assert r.store is False
        with pytest.raises(openai.NotFoundError) as err:
            api.responses.retrieve(r.id)
        assert "sessions.store_responses is off" in err.value.body["message"]
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="again", previous_response_id=r.id)
    assert (err.value.body["code"], err.value.body["param"]) == ("unsupported_parameter", "previous_response_id")


def test_responses_in_redis_are_shared_by_two_gateways(tmp_path, redis_url, redis_prefix):
    # Two ingress replicas over one Redis: a response stored through one is continued through
    # the other.
    sessions = {"backend": "redis", "redis_url": redis_url, "responses_key_prefix": redis_prefix}
    doc = gateway_profile(tmp_path / "intents", sessions=sessions)
    one = FakeModel("qwen-72b", completion("first answer", model="qwen-72b"))
    two = FakeModel("qwen-72b", completion("second answer", model="qwen-72b"))
    with running_gateway(tmp_path / "intents", one, doc=doc) as (client_one, _, _), \
            running_gateway(tmp_path / "intents", two, doc=doc) as (client_two, _, _):
        first = sdk(client_one).responses.create(model="qwen-72b", input="question one")
        assert sdk(client_two).responses.retrieve(first.id).output_text == "first answer"
        sdk(client_two).responses.create(model="qwen-72b", input="question two", previous_response_id=first.id)
    assert [m["content"] for m in two.calls[-1]["messages"]] == ["question one", "first answer", "question two"]


def test_an_unreachable_redis_answers_the_request_unstored_and_refuses_continuing(tmp_path, redis_servers):
    port = 6397   # nothing listens here
    doc = gateway_profile(tmp_path / "intents", sessions={"backend": "redis", "redis_timeout_s": 0.2,
                                                          "redis_url": redis_servers.url(port)})
    with running_gateway(tmp_path / "intents", doc=doc) as (client, _, fleet):
        api = sdk(client)
        r = api.responses.create(model="qwen-72b", input="hi")
        assert r.output_text == "hello" and r.store is False
        with pytest.raises(openai.APIStatusError) as err:
            api.responses.create(model="qwen-72b", input="again", previous_response_id="resp_1")
        assert err.value.status_code == 503 and err.value.body["code"] == "response_store_unavailable"
        assert err.value.response.headers["retry-after"] == "2"
    assert fleet.calls()["qwen-72b"] == 1


def test_input_items_list_what_the_request_sent_paged_as_openai_does(tmp_path):
    items = [{"role": "developer", "content": "be brief"},
             {"role": "user", "content": [{"type": "input_text", "text": "weather in Oslo?"}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "4 C"}]
    with running_gateway(tmp_path / "intents") as (client, _, _):
        api = sdk(client)
        r = api.responses.create(model="qwen-72b", input=items, tools=[WEATHER])
        newest_first = api.responses.input_items.list(r.id)
        # The SDK's auto-pagination follows last_id with ``after``, one item a page.
        oldest_first = list(api.responses.input_items.list(r.id, order="asc", limit=1))
        text = api.responses.input_items.list(api.responses.create(model="qwen-72b", input="hi").id)
        before = client.get(f"/v1/responses/{r.id}/input_items",
                            params={"order": "asc", "before": oldest_first[3].id, "limit": 2}).json()
        bad_limit = client.get(f"/v1/responses/{r.id}/input_items", params={"limit": 0})
        bad_cursor = client.get(f"/v1/responses/{r.id}/input_items", params={"after": "msg_nope"})
    assert [i.type for i in oldest_first] == ["message", "message", "function_call", "function_call_output"]
    assert [i.id for i in newest_first.data] == [i.id for i in reversed(oldest_first)]
    assert newest_first.has_more is False and len({i.id for i in oldest_first}) == 4
    assert oldest_first[0].content[0].text == "be brief" and oldest_first[3].output == "4 C"
    assert [(i.role, i.content[0].type, i.content[0].text) for i in text.data] == [("user", "input_text", "hi")]
    assert [i["id"] for i in before["data"]] == [oldest_first[1].id, oldest_first[2].id] and before["has_more"]
    assert bad_limit.status_code == 400 and bad_limit.json()["error"]["param"] == "limit"
    assert bad_cursor.status_code == 400 and bad_cursor.json()["error"]["param"] == "after"
