"""What the Responses and Conversations API tests share: the official SDK over the in-process
gateway, a flat function tool, and a model that calls it and then answers."""

from __future__ import annotations

import openai

from .responses import completion, tool_call

# A function tool in the Responses API's flat shape.
WEATHER = {"type": "function", "name": "get_weather", "description": "weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def sdk(client, key: str = "unused") -> openai.OpenAI:
    # FastAPI's test client is an httpx client: the official SDK talks to the app in process.
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key=key, http_client=client, max_retries=0)


def oslo_weather_replies(call_id: str) -> list[dict]:
    """An agent loop's two answers from qwen-72b: a call of get_weather for Oslo, then the
    answer once its output came back."""
    return [completion(None, model="qwen-72b", finish_reason="tool_calls",
                       tool_calls=[tool_call("get_weather", {"city": "Oslo"}, call_id)]),
            completion("It is 4 C in Oslo.", model="qwen-72b")]
