"""``truncation`` on ``POST /v1/responses``, read by the official ``openai`` client in process:
OpenAI's default ``"disabled"`` refuses a conversation too long for the model (400
``context_length_exceeded`` naming ``input``); ``"auto"`` drops its oldest turns until it fits,
the instructions and the latest turn always kept (what the model receives is asserted), says how
many messages went in ``x-vsr-context-dropped-messages``, and echoes ``truncation`` on the response.
The fake fleet's models hold 4,096 tokens; the gateway's estimate counts a long word-run high."""

from __future__ import annotations

import openai
import pytest

from fakes.fleet import FakeModel
from fakes.gateway import running_gateway
from fakes.responses import completion
from fakes.responses_api import sdk

# About 1,700 estimated tokens each: two of them fit 4,096 tokens, three do not.
LONG = "alpha beta gamma delta " * 300


def _chain(api, n: int) -> str:
    """Store ``n`` long turns, each continuing the last (with ``truncation: "auto"``, as a client
    that keeps a long conversation going sends it); the last response's id."""
    last = None
    for i in range(n):
        last = api.responses.create(model="qwen-72b", input=f"turn {i}: {LONG}", previous_response_id=last,
                                    instructions="Be brief.", truncation="auto").id
    return last


def test_auto_drops_the_oldest_turns_and_disabled_refuses(tmp_path):
    qwen = FakeModel("qwen-72b", replies=[completion(f"answer {i}", model="qwen-72b") for i in range(6)])
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        last = _chain(api, 3)
        calls = len(qwen.calls)
        with pytest.raises(openai.BadRequestError) as err:
            api.responses.create(model="qwen-72b", input="and now?", previous_response_id=last,
                                 instructions="Be brief.")
        assert (err.value.body["code"], err.value.body["param"]) == ("context_length_exceeded", "input")
        assert len(qwen.calls) == calls        # refused before any model call
        raw = api.responses.with_raw_response.create(model="qwen-72b", input="and now?", previous_response_id=last,
                                                     instructions="Be brief.", truncation="auto")
    r = raw.parse()
    sent = qwen.calls[-1]["messages"]
    # The instructions stay; whole turns go from the start (user message and its answer together).
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user", "assistant", "user"][-(len(sent) - 1):]
    assert sent[-1] == {"role": "user", "content": "and now?"} and sent[1]["role"] == "user"
    dropped = int(raw.headers["x-vsr-context-dropped-messages"])
    assert dropped >= 2 and len(sent) == 1 + 6 + 1 - dropped
    assert not any("turn 0:" in (m.get("content") or "") for m in sent)
    assert r.truncation == "auto" and r.status == "completed"


def test_auto_leaves_a_conversation_that_fits_as_it_is(tmp_path):
    qwen = FakeModel("qwen-72b", replies=[completion(f"answer {i}", model="qwen-72b") for i in range(2)])
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        api = sdk(client)
        first = api.responses.create(model="qwen-72b", input="hello")
        raw = api.responses.with_raw_response.create(model="qwen-72b", input="again", previous_response_id=first.id,
                                                     truncation="auto")
    assert [m["content"] for m in qwen.calls[-1]["messages"]] == ["hello", "answer 0", "again"]
    assert "x-vsr-context-dropped-messages" not in raw.headers and raw.parse().truncation == "auto"


def test_auto_cannot_cut_the_latest_turn_and_says_why(tmp_path):
    qwen = FakeModel("qwen-72b")
    with running_gateway(tmp_path / "intents", qwen) as (client, _, _):
        with pytest.raises(openai.BadRequestError) as err:
            sdk(client).responses.create(model="qwen-72b", input=LONG * 3, truncation="auto")
        # The output limit alone over the window: dropping turns cannot help, the limit is named.
        with pytest.raises(openai.BadRequestError) as limit:
            sdk(client).responses.create(model="qwen-72b", input="hi", truncation="auto", max_output_tokens=5000)
        with pytest.raises(openai.BadRequestError) as bad:
            sdk(client).responses.create(model="qwen-72b", input="hi", truncation="sometimes")
    assert (err.value.body["code"], err.value.body["param"]) == ("context_length_exceeded", "input")
    assert "4096" in err.value.body["message"]
    assert (limit.value.body["code"], limit.value.body["param"]) == ("context_length_exceeded", "max_output_tokens")
    assert bad.value.body["param"] == "truncation"
    assert qwen.calls == []


def test_auto_fits_a_fusion_conversation_to_every_reader(tmp_path):
    plugin = [{"id": "fusion", "analysis_models": ["qwen-72b", "coder"], "model": "k2"}]
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: {LONG}"} for i in range(4)]
    with running_gateway(tmp_path / "intents") as (client, _, fleet):
        api = sdk(client)
        with pytest.raises(openai.BadRequestError):
            api.responses.create(model="vllm-sr/fusion", input=[*history, {"role": "user", "content": "sum up"}],
                                 extra_body={"plugins": plugin})
        raw = api.responses.with_raw_response.create(
            model="vllm-sr/fusion", input=[*history, {"role": "user", "content": "sum up"}],
            truncation="auto", extra_body={"plugins": plugin})
    assert raw.parse().output_text == "hello"
    dropped = int(raw.headers["x-vsr-context-dropped-messages"])
    for member in ("qwen-72b", "coder"):
        sent = fleet.models[member].calls[-1]["messages"]
        assert sent[-1] == {"role": "user", "content": "sum up"} and sent[0]["role"] == "user"
        assert len(sent) == 5 - dropped and dropped >= 2
