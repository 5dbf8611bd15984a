"""Structured outputs against the simulated engine in-process (its fenced and broken JSON styles).

The simulated engine cannot constrain decoding, so these run the unconstrained path: the
engine's own answer, then the corrective retry on the same engine.
"""

import json

import pytest

from serve_app.config.models import SimulatedSettings
from serve_app.outputs import StructuredOutputError, contract_from_request, enforce, prepare_request

simulated = pytest.importorskip("deployments.simulated")

SIM_SCHEMA = {"type": "object", "required": ["model", "simulated", "answer"],
              "properties": {"model": {"const": "qwen-72b"}, "simulated": {"type": "boolean"},
                             "answer": {"type": "string"}}}
# The simulated engine never produces a "confidence" key: always schema-invalid.
STRICTER_SCHEMA = {**SIM_SCHEMA, "required": [*SIM_SCHEMA["required"], "confidence"]}


def engine(style: str):
    settings = SimulatedSettings(ttft_ms=0, tpot_ms=0, output_tokens=12, output_style=style)
    return simulated.SimulatedEngine("qwen-72b", settings, latency_scale=0, max_model_len=4096)


def request(schema):
    return {"messages": [{"role": "user", "content": "Describe yourself as JSON."}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "sim", "schema": schema}}}


async def run(style: str, schema):
    sim = engine(style)
    calls = []

    async def retry(body):
        calls.append(body)
        return await sim.complete(body)

    req = request(schema)
    contract = contract_from_request(req)
    body = prepare_request(contract, req, engine_constrained=False)
    answer = await sim.complete(body)
    return await enforce(contract, answer, retry, engine_constrained=False, request=body), calls


@pytest.mark.asyncio
@pytest.mark.parametrize("style", ["json", "fenced_json", "broken_json"])
async def test_schema_valid_output_in_every_style(style):
    out, calls = await run(style, SIM_SCHEMA)
    value = json.loads(out["choices"][0]["message"]["content"])
    assert value["model"] == "qwen-72b" and value["simulated"] is True
    assert calls == []  # fences stripped / truncation repaired without a retry


@pytest.mark.asyncio
async def test_schema_invalid_output_fails_after_one_retry_with_raw_text():
    with pytest.raises(StructuredOutputError) as info:
        await run("json", STRICTER_SCHEMA)
    attempts = info.value.details["attempts"]
    assert len(attempts) == 2
    assert all(a["raw"].startswith('{"model": "qwen-72b"') for a in attempts)
    assert all("'confidence' is a required property" in a["error"] for a in attempts)


@pytest.mark.asyncio
async def test_prose_output_is_an_error_never_a_success():
    with pytest.raises(StructuredOutputError) as info:
        await run("text", SIM_SCHEMA)
    assert info.value.details["raw"].startswith("[simulated qwen-72b]")


def test_unclosed_fence_is_stripped_by_extract_json():
    from serve_app.jsonutil import extract_json

    assert extract_json('```json\n{"a": 1, "b": [2, 3]') == {"a": 1, "b": [2, 3]}
