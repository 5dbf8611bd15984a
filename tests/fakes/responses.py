"""OpenAI-shaped answers for fakes: a chat completion, a text completion and a tool call."""

from __future__ import annotations

import itertools
import json
from typing import Any, Optional

_ids = itertools.count(1)


def completion(content: Optional[str], *, model: str = "fake", reasoning: Optional[str] = None,
               tool_calls: Optional[list] = None, prompt_tokens: int = 10,
               completion_tokens: int = 5, finish_reason: str = "stop") -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-fake-{next(_ids)}", "object": "chat.completion", "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def tool_call(name: str = "web_search", arguments: Optional[dict] = None, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments or {"query": "x"})}}


def text_completion(text: str, *, model: str = "fake", choices: int = 1, prompt_tokens: int = 10,
                    completion_tokens: int = 5, finish_reason: str = "stop") -> dict:
    return {
        "id": f"cmpl-fake-{next(_ids)}", "object": "text_completion", "created": 1700000000,
        "model": model,
        "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": finish_reason}
                    for i in range(choices)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
