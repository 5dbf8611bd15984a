"""The gateway's client of a vLLM deployment speaks plain JSON with it (HorizonLLMServer's
chat_body / completions_body): bodies out, dicts and SSE strings back, errors as OpenAI error
bodies mapped to typed errors. The gateway never builds vLLM's request objects."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.errors import ContextLengthExceeded, InvalidRequest, UpstreamError
from serve_app.fleet.backends.vllm import VllmHandleClient
from fakes.fleet import FakeHandle


class _Gen:
    def __init__(self, items):
        self._items = list(items)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self._items:
            raise StopAsyncIteration
        return self._items.pop(0)

    def cancel(self):
        pass


def streaming_handle(replies) -> FakeHandle:
    """A handle whose every call streams ``replies`` (a fresh copy each time)."""
    return FakeHandle(lambda method, body: _Gen(replies))


def test_a_plain_body_goes_out_and_the_response_comes_back_under_the_alias():
    handle = streaming_handle([{"id": "x", "object": "chat.completion", "model": "smol", "choices": []}])
    client = VllmHandleClient("qwen-72b", handle, served_name="smol")
    out = asyncio.run(client.complete({"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]}))
    assert out["model"] == "qwen-72b" and out["object"] == "chat.completion"
    method, body = handle.calls[0]
    assert method == "chat_body" and type(body) is dict
    assert body["model"] == "smol" and body["stream"] is False and "stream_options" not in body


def test_text_completions_use_completions_body_and_streams_ask_for_usage():
    sse = ['data: {"id":"c","object":"text_completion","model":"smol","choices":[{"index":0,"text":"a"}]}\n\n',
           "data: [DONE]\n\n"]
    handle = streaming_handle([sse])
    client = VllmHandleClient("k2", handle, served_name="smol")

    async def collect():
        return [c async for c in client.stream_text({"model": "k2", "prompt": "x"})]

    chunks = asyncio.run(collect())
    assert [c.data["model"] for c in chunks] == ["k2"]
    method, body = handle.calls[0]
    assert method == "completions_body" and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("message,error", [
    ("invalid request: temperature must be >= 0", InvalidRequest),
    ("This model's maximum context length is 2048 tokens", ContextLengthExceeded),
])
def test_an_error_body_is_a_typed_400(message, error):
    handle = streaming_handle([{"error": {"message": message, "type": "BadRequestError", "code": 400}}])
    client = VllmHandleClient("k2", handle, served_name="smol")
    with pytest.raises(error):
        asyncio.run(client.complete({"model": "k2", "messages": []}))


def test_an_engine_failure_in_a_stream_is_a_5xx():
    handle = streaming_handle([[{"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}]])
    client = VllmHandleClient("k2", handle, served_name="smol")

    async def collect():
        return [c async for c in client.stream({"model": "k2", "messages": []})]

    with pytest.raises(UpstreamError):
        asyncio.run(collect())
