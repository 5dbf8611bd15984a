"""The simulated engine honours the structured paths like a grammar-constrained engine: JSON that
validates against a ``response_format`` schema, tool calls whose arguments validate against the
tool's parameters, ``n`` choices, and text completions (in process, no Ray cluster)."""

from __future__ import annotations

import asyncio
import json
from typing import Optional

import jsonschema
import pytest
from pydantic import BaseModel, Field

from deployments.schema_sample import sample
from deployments.simulated import SimulatedEngine
from serve_app.config.models import SimulatedSettings


class Address(BaseModel):
    street: str
    city: str = Field(min_length=3, max_length=20)
    zip_code: Optional[str] = None


class Person(BaseModel):
    name: str
    age: int = Field(ge=18, le=99)
    score: float = Field(gt=0, lt=1)
    tags: list[str] = Field(min_length=2, max_length=3)
    kind: str = Field(pattern=r"^[a-z]+$", examples=["human"])
    home: Address
    friends: list[Address] = []
    email: str = Field(json_schema_extra={"format": "email"})


SCHEMAS = [
    Person.model_json_schema(),                                      # pydantic: $defs, $ref, anyOf null
    {"type": "object", "additionalProperties": False, "required": ["colour", "bright"],
     "properties": {"colour": {"type": "string", "enum": ["red", "green"]}, "bright": {"type": "boolean"}}},
    {"type": "array", "items": {"type": "integer", "multipleOf": 5, "minimum": 7}, "minItems": 2,
     "uniqueItems": True},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string", "format": "date-time"}}, "required": ["a"]},
               {"properties": {"b": {"const": 3}}, "required": ["b"]}]},
    {"oneOf": [{"type": "null"}, {"type": "object", "properties": {"x": {"type": ["null", "number"],
                                                                          "exclusiveMaximum": 0}},
                                  "required": ["x"]}]},
    {"type": "object", "properties": {"tree": {"$ref": "#"}}},       # recursive
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_sampled_values_validate_against_their_schema(schema):
    for seed in range(3):
        value = sample(schema, seed, ["paris", "rain"])
        jsonschema.validate(value, schema)


def engine(**settings) -> SimulatedEngine:
    return SimulatedEngine("qwen-72b", SimulatedSettings(ttft_ms=0, tpot_ms=0, **settings),
                           latency_scale=0, max_model_len=4096)


def ask(**extra) -> dict:
    return {"messages": [{"role": "user", "content": "Describe Ada as JSON."}], **extra}


def test_json_schema_answers_conform():
    schema = Person.model_json_schema()
    out = asyncio.run(engine().complete(ask(response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": schema}})))
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)


def test_json_object_answers_an_object_and_fault_styles_still_win():
    out = asyncio.run(engine().complete(ask(response_format={"type": "json_object"})))
    assert isinstance(json.loads(out["choices"][0]["message"]["content"]), dict)
    broken = asyncio.run(engine(output_style="broken_json").complete(ask(response_format={"type": "json_object"})))
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken["choices"][0]["message"]["content"])


def test_tool_calls_name_the_chosen_tool_with_arguments_valid_for_it():
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "get_person", "parameters": Person.model_json_schema()}}]
    out = asyncio.run(engine().complete(ask(tools=tools, tool_choice={"type": "function",
                                                                      "function": {"name": "get_person"}})))
    choice = out["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert choice["finish_reason"] == "tool_calls" and call["function"]["name"] == "get_person"
    jsonschema.validate(json.loads(call["function"]["arguments"]), Person.model_json_schema())
    none = asyncio.run(engine().complete(ask(tools=tools, tool_choice="none")))
    assert "tool_calls" not in none["choices"][0]["message"]


def test_n_choices_complete_and_stream_with_their_index():
    out = asyncio.run(engine().complete(ask(n=3, max_tokens=6)))
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"].startswith("[simulated qwen-72b]") for c in out["choices"])

    async def chunks():
        return [c async for c in engine().generate(ask(n=2, max_tokens=5))]

    seen = asyncio.run(chunks())
    assert {c["choices"][0]["index"] for c in seen} == {0, 1}
    assert sum(1 for c in seen if c["choices"][0]["finish_reason"]) == 2 and "usage" in seen[-1]


def test_text_completions_continue_each_prompt_n_times():
    out = asyncio.run(engine().complete_text({"prompt": ["Once upon", "The end"], "n": 2, "max_tokens": 6}))
    assert out["object"] == "text_completion" and [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert all(c["text"].strip() and "[simulated" not in c["text"] for c in out["choices"])
    assert out["usage"]["completion_tokens"] > 0

    async def chunks():
        return [c async for c in engine().generate_text({"prompt": "Once upon", "max_tokens": 5})]

    seen = asyncio.run(chunks())
    assert seen[-1]["choices"] == [] and seen[-1]["usage"]["prompt_tokens"] > 0
    assert all(c["object"] == "text_completion" for c in seen)


def assembled(chunks: list[dict]) -> dict:
    """What a client makes of the stream: each choice's text, tool calls and finish reason."""
    choices: dict[int, dict] = {}
    for c in chunks:
        for choice in c["choices"]:
            got = choices.setdefault(choice["index"], {"content": "", "tool_calls": [], "finish_reason": None})
            got["content"] += choice["delta"].get("content") or ""
            got["tool_calls"] += [{k: v for k, v in t.items() if k not in ("index", "id")}
                                  for t in choice["delta"].get("tool_calls") or []]
            got["finish_reason"] = choice["finish_reason"] or got["finish_reason"]
    return {"choices": [choices[i] for i in sorted(choices)], "usage": chunks[-1]["usage"]}


def whole(answer: dict) -> dict:
    return {"choices": [{"content": c["message"]["content"] or "",
                         "tool_calls": [{k: v for k, v in t.items() if k != "id"}
                                        for t in c["message"].get("tool_calls") or []],
                         "finish_reason": c["finish_reason"]} for c in answer["choices"]],
            "usage": answer["usage"]}


TOOLS = [{"type": "function", "function": {"name": "get_person", "parameters": Person.model_json_schema()}}]


@pytest.mark.parametrize("extra,settings", [
    ({}, {}),
    ({"max_tokens": 3}, {}),                                   # cut by the limit: finish "length"
    ({"n": 3, "max_tokens": 6}, {}),
    ({"tools": TOOLS}, {}),
    ({"response_format": {"type": "json_object"}, "n": 2}, {}),
    ({}, {"output_style": "fenced_json"}),
    ({"n": 2}, {"empty_rate": 1.0}),                            # empty answers
])
def test_a_whole_answer_is_what_the_stream_of_the_same_request_adds_up_to(extra, settings):
    """``complete`` builds the answer directly (no chunks): it must say what ``generate`` streams."""
    async def both() -> tuple[dict, list[dict]]:
        return (await engine(**settings).complete(ask(**extra)),
                [c async for c in engine(**settings).generate(ask(**extra))])

    answer, chunks = asyncio.run(both())
    assert whole(answer) == assembled(chunks)
    assert answer["object"] == "chat.completion" and answer["model"] == "qwen-72b"
    if "tools" in extra:
        assert answer["choices"][0]["message"]["content"] is None
        assert answer["choices"][0]["message"]["tool_calls"][0]["id"].startswith("call_")


def test_a_whole_answer_waits_as_long_as_its_stream():
    """TTFT, then one time per output token after each choice's first: the same total."""
    slow = SimulatedEngine("qwen-72b", SimulatedSettings(ttft_ms=40, tpot_ms=20, output_tokens=5),
                           latency_scale=1.0)

    async def timed(make) -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await make()
        return loop.time() - start

    tokens: list[str] = []

    async def stream() -> None:
        async for c in slow.generate(ask(n=2)):
            if c["choices"][0]["delta"].get("content"):
                tokens.append(c["choices"][0]["delta"]["content"])

    async def run() -> tuple[float, float]:
        return await timed(lambda: slow.complete(ask(n=2))), await timed(stream)

    whole_s, stream_s = asyncio.run(run())
    assert len(tokens) >= 4
    expected = 0.040 + (len(tokens) - 2) * 0.020   # every token after each choice's first
    assert expected <= whole_s < expected + 0.1 and expected <= stream_s < expected + 0.1


def test_response_ids_are_unique_per_answer_and_across_engines():
    """Ids come from each engine's random prefix and a counter (not a uuid per answer): every
    answer of one engine differs, and two replicas' engines never give the same id."""
    def engine() -> SimulatedEngine:
        return SimulatedEngine("m", SimulatedSettings(output_tokens=2), latency_scale=0.0)

    async def ids(e: SimulatedEngine) -> list[str]:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        whole = [(await e.complete(body))["id"] for _ in range(50)]
        streamed = [[c async for c in e.generate(body)][0]["id"] for _ in range(50)]
        text = [(await e.complete_text({"prompt": "hi"}))["id"] for _ in range(50)]
        return whole + streamed + text

    first, second = asyncio.run(ids(engine())), asyncio.run(ids(engine()))
    assert len(set(first)) == 150 and len(set(second)) == 150
    assert not set(first) & set(second)
    assert all(i.startswith(("chatcmpl-sim-", "cmpl-sim-")) for i in first)
