"""The chat service keeps routing facts on errors raised after the decision."""

import asyncio
import json

import pytest

from serve_app.api.protocol import ChatCompletionRequest, parse_model
from serve_app.config.loader import horizon_args, parse_config, read_document
from serve_app.errors import HorizonError, UpstreamError
from serve_app.chat import ChatService


class _Decision:
    def __init__(self, name):
        self.name = name
        self.refusal = None
        self.output_contract = None
        self.algorithm = type("A", (), {"type": "static"})()


class _Routing:
    def __init__(self):
        self.decision = _Decision("code_generation")
        self.model = "coder"
        self.task_type = "code"
        self.sampling_key = "code"
        self.routing_ms = 1.0

    def headers(self, debug=False):
        return {"x-vsr-selected-decision": "code_generation", "x-vsr-selected-model": "coder",
                "x-vsr-task-type": "code"}


class _Router:
    async def route(self, body, fusion_only=False):
        return _Routing()


class _FailingFleet:
    async def complete(self, task_type, alias, body, fallback_ok=True, **_):
        raise UpstreamError(f"model {alias!r} failed")


def test_error_after_routing_carries_the_routing_headers():
    cfg = parse_config(dict(horizon_args(read_document("configs/sim.yaml"))))
    service = ChatService(cfg, _FailingFleet(), router=_Router())
    raw = json.dumps({"model": "vllm-sr/auto",
                      "messages": [{"role": "user", "content": "write a sort function"}]}).encode()
    with pytest.raises(HorizonError) as info:
        asyncio.run(service.chat(parse_model(ChatCompletionRequest, raw).to_call()))
    assert info.value.status == 502
    headers = info.value.headers()
    assert headers["x-vsr-selected-decision"] == "code_generation"
    assert headers["x-vsr-task-type"] == "code"


class _AnsweringFleet:
    """Answers every call with the next text in ``answers``."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    async def complete(self, task_type, alias, body, fallback_ok=True, **_):
        self.calls += 1
        text = self.answers.pop(0)
        return {"id": "x", "object": "chat.completion", "model": alias,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}, []


@pytest.mark.parametrize("answers, status, calls", [
    (['{"n": 1}'], "valid", 1),
    (['```json\n{"n": 1,}\n```'], "repaired", 1),
    (["no json here", '{"n": 1}'], "retried", 2),
])
def test_structured_output_header_says_how_the_json_was_obtained(answers, status, calls, monkeypatch):
    # An engine that cannot constrain its decoding (the simulated one honours response_format,
    # so it is switched to the unconstrained path here): extraction, repair, corrective retry.
    from serve_app.fleet.backends import backend

    monkeypatch.setattr(backend("simulated"), "constrains_decoding", False)
    cfg = parse_config(dict(horizon_args(read_document("configs/sim.yaml"))))
    fleet = _AnsweringFleet(answers)
    service = ChatService(cfg, fleet, router=_Router())
    raw = json.dumps({"model": "vllm-sr/auto", "messages": [{"role": "user", "content": "count"}],
                      "response_format": {"type": "json_schema", "json_schema": {
                          "name": "n", "schema": {"type": "object", "required": ["n"],
                                                  "properties": {"n": {"type": "integer"}}}}}}).encode()
    outcome = asyncio.run(service.chat(parse_model(ChatCompletionRequest, raw).to_call()))
    assert outcome.headers["x-vsr-structured-output"] == status
    assert json.loads(outcome.response["choices"][0]["message"]["content"]) == {"n": 1}
    assert fleet.calls == calls
