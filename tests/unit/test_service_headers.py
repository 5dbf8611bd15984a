"""The chat service keeps routing facts on errors raised after the decision."""

import asyncio
import json

import pytest

from serve_app.api.protocol import ChatCompletionRequest, parse_model
from serve_app.config.loader import horizon_args, parse_config, read_document
from serve_app.errors import HorizonError, UpstreamError
from serve_app.service import ChatService


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
    async def complete(self, task_type, alias, body, fallback_ok=True):
        raise UpstreamError(f"model {alias!r} failed")


def test_error_after_routing_carries_the_routing_headers():
    cfg = parse_config(dict(horizon_args(read_document("configs/sim.yaml"))))
    service = ChatService(cfg, _FailingFleet(), router=_Router())
    raw = json.dumps({"model": "vllm-sr/auto",
                      "messages": [{"role": "user", "content": "write a sort function"}]}).encode()
    with pytest.raises(HorizonError) as info:
        asyncio.run(service.chat(parse_model(ChatCompletionRequest, raw)))
    assert info.value.status == 502
    headers = info.value.headers()
    assert headers["x-vsr-selected-decision"] == "code_generation"
    assert headers["x-vsr-task-type"] == "code"
