"""OpenAI's Responses API (``POST /v1/responses``) over the chat pipeline.

Agent frameworks (OpenAI's Agents SDK, Codex, LangChain's ``use_responses_api``) speak the
Responses API rather than chat completions. Every routing, Fusion, resilience and auth feature
lives on the chat path, so a Responses request is translated into a chat request (``input``
items into messages, ``instructions`` into a system message, flat function tools into chat
tools, ``text.format`` into ``response_format``), runs through the very same gateway call, and
its answer (or its stream of chunks) is translated back into a ``response`` object (or the
Responses event stream: ``response.created`` … ``response.completed``).

Responses are stored (``store``, true by default as on OpenAI) when the profile keeps them
(``sessions.store_responses``): ``previous_response_id`` continues one and ``GET
/v1/responses/{id}`` returns it (serve_app.api.response_archive); ``conversation`` answers in a
conversation of the Conversations API (serve_app.api.conversations). Stored prompts,
``background`` and ``item_reference`` items are a 400 naming the parameter; the gateway's
sessions (``X-Session-ID``) keep a conversation's history as they do on chat. Hosted tools (web
search, file search, ...) are not the gateway's to run: only ``function`` tools are accepted.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Optional, Sequence, Union

from pydantic import Field, StrictFloat, StrictInt, ValidationError

from serve_app.errors import HorizonError, InvalidRequest
from serve_app.json_wire import dumps as json_bytes
from serve_app.messages.chunks import Chunk

from .protocol import ChatCompletionRequest, OpenBody, checked_metadata, error_param

log = logging.getLogger("ray.serve")

# Sampling fields of vLLM's that a client may add (``extra_body``): passed to the engine as on
# chat completions.
_PASSED_THROUGH = {"seed", "stop", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                   "repetition_penalty"}
# Accepted and answered as the gateway has them (no hosted features); clients send these by
# default, so refusing them would refuse the client.
_ACCEPTED = {"metadata", "reasoning", "service_tier",
             "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "stream_options",
             "max_tool_calls"}
# The ``include`` value that asks for the answer's token log probabilities (the others name
# hosted tools' outputs and encrypted reasoning, which the gateway does not produce).
_LOGPROBS = "message.output_text.logprobs"
# Needs state the gateway does not keep.
_STATEFUL = {"prompt": "stored prompts are not available: send the prompt's text in 'input'"}


class ResponsesRequest(OpenBody):
    """``POST /v1/responses``. Undeclared fields are not passed on wholesale as on chat (a chat
    engine would not know Responses' fields): ``to_chat_request`` passes vLLM's sampling fields,
    accepts what clients send by default, and refuses the rest by name."""

    model: str = Field(..., min_length=1)
    input: Union[str, list[dict[str, Any]]]
    instructions: Optional[str] = None
    max_output_tokens: Optional[StrictInt] = Field(None, ge=1)
    temperature: Optional[StrictFloat] = Field(None, ge=0, le=2)
    top_p: Optional[StrictFloat] = Field(None, gt=0, le=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None
    text: Optional[dict[str, Any]] = None
    stream: bool = False
    background: Optional[bool] = None
    store: Optional[bool] = None
    previous_response_id: Optional[str] = Field(None, min_length=1, max_length=256)
    # A conversation of the Conversations API: its id, or {"id": ...} (serve_app.api.conversations).
    conversation: Optional[Union[str, dict[str, Any]]] = None
    # "auto": a conversation too long for the model loses its oldest turns (OpenAI's default
    # "disabled": it is a 400 context_length_exceeded).
    truncation: Optional[Literal["auto", "disabled"]] = None
    # Extra output to include; only "message.output_text.logprobs" adds anything here.
    include: Optional[list[str]] = None
    # Alternatives per token position when logprobs are included (OpenAI's bounds).
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=20)
    metadata: Optional[dict[str, str]] = None
    user: Optional[str] = None
    plugins: Optional[list[dict[str, Any]]] = None

    @property
    def conversation_id(self) -> Any:
        """The id ``conversation`` names (None without one; anything else than a non-empty
        string is a 400 when it is looked up)."""
        ref = self.conversation
        return ref.get("id", "") if isinstance(ref, dict) else ref


def _invalid(param: str, message: str) -> InvalidRequest:
    """A 400 naming the Responses parameter that is wrong, and what is wrong with it."""
    return InvalidRequest(f"invalid value for '{param}': {message}", param=param)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# ---------------------------------------------------------------- request: Responses -> chat
def _check_fields(req: ResponsesRequest) -> None:
    for name, why in _STATEFUL.items():
        if (req.model_extra or {}).get(name) is not None:
            raise InvalidRequest(f"'{name}' is not supported: {why}", param=name, code="unsupported_parameter")
    if req.background:
        raise InvalidRequest("background responses are not supported: the gateway runs no response "
                             "after its request ends; send the request without 'background'", param="background",
                             code="unsupported_parameter")
    checked_metadata(req.metadata)   # stored with the response: OpenAI's bounds
    for name in sorted(req.model_extra or {}):   # fields the request model does not declare
        if name not in _PASSED_THROUGH | _ACCEPTED | set(_STATEFUL):
            raise InvalidRequest(f"unknown parameter '{name}' for /v1/responses", param=name,
                                 code="unknown_parameter")


def _content_part(part: Any, where: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _invalid(where, "a content part must be an object")
    ptype = part.get("type")
    if ptype in ("input_text", "output_text", "text"):
        if not isinstance(part.get("text"), str):
            raise _invalid(f"{where}.text", "is required")
        return {"type": "text", "text": part["text"]}
    if ptype == "refusal":
        return {"type": "refusal", "refusal": str(part.get("refusal", ""))}
    if ptype == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise _invalid(f"{where}.image_url", "an image URL or data URL is "
                                                 "required (uploaded files are not available)")
        image: dict[str, Any] = {"url": url}
        if part.get("detail") in ("auto", "low", "high"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise _invalid(f"{where}.type", f"content part type {ptype!r} is not supported; "
                                    "expected input_text, input_image, output_text or refusal")


def _message_content(content: Any, where: str) -> Union[str, list[dict[str, Any]]]:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return [_content_part(p, f"{where}[{i}]") for i, p in enumerate(content)]
    raise _invalid(where, "must be a string or a list of content parts")


def _output_text(output: Any, where: str) -> str:
    """A function call's output as the tool message's text."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        parts = [_content_part(p, f"{where}[{i}]") for i, p in enumerate(output)]
        if all(p["type"] == "text" for p in parts):
            return "".join(p["text"] for p in parts)
    raise _invalid(where, "must be a string or a list of text parts")


def _assistant_content(content: Union[str, list[dict[str, Any]]]) -> Union[str, list[dict[str, Any]]]:
    """An assistant message's parts as one string, the form every chat template takes: its text,
    or its refusal when it has no text (the gateway's refusals carry the same words as both)."""
    if isinstance(content, str) or any(p["type"] not in ("text", "refusal") for p in content):
        return content
    texts = [p["text"] for p in content if p["type"] == "text"]
    return "".join(texts) if texts else "".join(p["refusal"] for p in content)


def item_messages(items: Sequence[dict[str, Any]], places: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Responses items (a request's input, or a stored response's input and output) as chat
    messages, and for each the place (``places``, per item) it came from, for errors."""
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    for item, where in zip(items, places):
        itype = item.get("type", "message")
        if itype == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise _invalid(f"{where}.role", "expected user, system, developer "
                                                f"or assistant, got {role!r}")
            content = _message_content(item.get("content"), f"{where}.content")
            messages.append({"role": role, "content": _assistant_content(content) if role == "assistant" else content})
            origins.append(where)
        elif itype == "function_call":
            for key in ("call_id", "name"):
                if not isinstance(item.get(key), str) or not item[key]:
                    raise _invalid(f"{where}.{key}", "is required")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": str(item.get("arguments") or "")}}
            last = messages[-1] if messages else None
            # Calls made in one assistant turn arrive as consecutive items: one chat message.
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                if not last.get("content"):
                    last["content"] = None
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                origins.append(where)
        elif itype == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not item["call_id"]:
                raise _invalid(f"{where}.call_id", "is required")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _output_text(item.get("output"), f"{where}.output")})
            origins.append(where)
        elif itype == "reasoning":
            continue  # a model's earlier reasoning is not replayed to it (as on chat completions)
        elif itype == "item_reference":
            raise InvalidRequest(f"'{where}' refers to a stored item: items are not stored one by one "
                                 "(previous_response_id continues a whole response); send the item itself",
                                 param=f"{where}.type", code="unsupported_parameter")
        else:
            raise _invalid(f"{where}.type", f"input item type {itype!r} is not "
                                            "supported; expected message, function_call, function_call_output or "
                                            "reasoning")
    return messages, origins


def _input(req: ResponsesRequest) -> tuple[list[dict[str, Any]], list[str]]:
    """The request's ``input`` as items (a string is one user message) and their places."""
    if isinstance(req.input, str):
        return [{"role": "user", "content": req.input}], ["input"]
    return req.input, [f"input[{i}]" for i in range(len(req.input))]


def input_messages(req: ResponsesRequest) -> tuple[list[dict[str, Any]], list[str]]:
    """The chat messages (``instructions``, then ``input``), and for each the Responses
    parameter it came from (for errors)."""
    items, places = _input(req)
    if not items:
        raise _invalid("input", "must not be empty")
    messages, origins = item_messages(items, places)
    if req.instructions:
        return [{"role": "system", "content": req.instructions}, *messages], ["instructions", *origins]
    return messages, origins


def stored_turn_messages(turns: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of stored turns, oldest first: each one's input items (see
    :func:`input_items`) and its response's output."""
    items = [item for turn in turns for item in [*turn["input_items"], *turn["response"].get("output", [])]]
    return item_messages(items, ["previous_response_id"] * len(items))[0]


_ITEM_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def input_items(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as stored items (see :func:`stored_items`)."""
    return stored_items(_input(req)[0])


def stored_items(raw: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as stored: each has its type, status and an id (so that pages of them have
    stable cursors); content stays as sent (see :func:`listed_item`)."""
    items = []
    for item in raw:
        item = {"type": "message", **item}
        if item["type"] in ("message", "function_call_output"):
            item.setdefault("status", "completed")
        item.setdefault("id", _new_id(_ITEM_ID_PREFIX.get(item["type"], "item")))
        items.append(item)
    return items


def listed_item(item: dict[str, Any]) -> dict[str, Any]:
    """A stored item as a list of items shows it (a response's input items, a conversation's
    items): message content is always a list of parts."""
    if item["type"] != "message" or not isinstance(item.get("content"), str):
        return item
    kind = "output_text" if item.get("role") == "assistant" else "input_text"
    return {**item, "content": [{"type": kind, "text": item["content"]}]}


def _chat_tools(req: ResponsesRequest) -> Optional[list[dict[str, Any]]]:
    if not req.tools:
        # ``tools: []`` is the Responses API's default (the Agents SDK sends it for an agent
        # without tools); chat engines refuse an empty list, so there is none.
        return None
    tools = []
    for i, tool in enumerate(req.tools):
        if tool.get("type") != "function":
            raise _invalid(f"tools[{i}].type", "only function tools are available "
                                               f"(the gateway runs no hosted tools), got {tool.get('type')!r}")
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        tools.append({"type": "function", "function": function})
    return tools


def _chat_tool_choice(choice: Union[str, dict[str, Any], None]) -> Union[str, dict[str, Any], None]:
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not choice.get("name"):
            raise _invalid("tool_choice", "expected 'none', 'auto', 'required' or "
                                          "{\"type\": \"function\", \"name\": ...}")
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(text: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _invalid("text.format", "expected an object such as {\"type\": \"json_schema\", ...}, "
                                      f"got {type(fmt).__name__}")
    if fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise _invalid("text.format.schema", "a JSON schema object is required")
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise _invalid("text.format.type", "expected text, json_object or json_schema, "
                                       f"got {fmt.get('type')!r}")


@dataclass(frozen=True)
class TranslatedRequest:
    """The chat request a Responses request stands for, and where each chat message came from,
    so that an error the chat path raises names the parameter the client sent."""

    chat: ChatCompletionRequest
    # Per chat message: "instructions", "previous_response_id", "conversation" or "input[i]".
    origins: list[str]

    def reword(self, exc: HorizonError) -> HorizonError:
        """The chat path's error, naming the Responses parameters (in ``param`` and the message)."""
        if exc.param:
            exc.param = responses_wording(exc.param, self.origins)
        exc.message = responses_wording(exc.message, self.origins)
        exc.args = (exc.message,)
        return exc


# Chat parameters that have another name in the Responses API.
_RENAMED = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens",
            "response_format": "text.format", "messages": "input"}
_CHAT_WORDS = re.compile(r"\bmessages\[(\d+)\]|\btools\[(\d+)\]\.function\.|"
                         r"\b(max_completion_tokens|max_tokens|response_format|messages)\b")


def responses_wording(text: str, origins: list[str]) -> str:
    """Chat parameter names in ``text`` (a ``param`` or an error message) as the Responses
    parameters they came from:
    ``messages[2]`` → ``input[1]``, ``tools[0].function.name`` → ``tools[0].name``,
    ``max_tokens`` → ``max_output_tokens``."""
    def replace(match: re.Match) -> str:
        message, tool, word = match.groups()
        if message is not None:
            return origins[int(message)] if int(message) < len(origins) else "input"
        if tool is not None:
            return f"tools[{tool}]."
        return _RENAMED[word]
    return _CHAT_WORDS.sub(replace, text)


def to_chat_request(req: ResponsesRequest, previous: Sequence[dict[str, Any]] = (),
                    previous_from: str = "previous_response_id") -> TranslatedRequest:
    """The chat request a Responses request stands for, continuing the ``previous`` conversation
    (a stored response's or a conversation's, after the instructions; ``previous_from`` names
    the parameter that brought it); a 400 names the Responses parameter."""
    _check_fields(req)
    messages, origins = input_messages(req)
    system = 1 if req.instructions else 0
    messages[system:system] = [dict(m) for m in previous]
    origins[system:system] = [previous_from] * len(previous)
    body: dict[str, Any] = {"model": req.model, "messages": messages, "stream": req.stream}
    tools, tool_choice = _chat_tools(req), _chat_tool_choice(req.tool_choice)
    if tools is None and tool_choice in ("auto", "none"):
        tool_choice = None   # nothing to choose from, and engines refuse a choice without tools
    optional = {"max_completion_tokens": req.max_output_tokens, "temperature": req.temperature,
                "top_p": req.top_p, "tools": tools, "tool_choice": tool_choice,
                "parallel_tool_calls": req.parallel_tool_calls, "response_format": _response_format(req.text),
                "user": req.user, "plugins": req.plugins}
    body.update({k: v for k, v in optional.items() if v is not None})
    if _LOGPROBS in (req.include or []):
        body.update(logprobs=True, top_logprobs=req.top_logprobs or 0)
    body.update({k: v for k, v in (req.model_extra or {}).items() if k in _PASSED_THROUGH and v is not None})
    if req.stream:
        body["stream_options"] = {"include_usage": True}  # response.completed carries usage
    try:
        chat = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        err = max(exc.errors(), key=lambda e: len(e.get("loc", ())))
        chat_param, msg = error_param(err)
        param = responses_wording(chat_param, origins)
        raise InvalidRequest(f"invalid value for '{param}': {msg}", param=param, code="invalid_value") from None
    return TranslatedRequest(chat, origins)


# ---------------------------------------------------------------- answer: chat -> Responses
def _usage(usage: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if not usage:
        return None
    details = usage.get("prompt_tokens_details") or {}
    return {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)),
            "input_tokens_details": {"cached_tokens": details.get("cached_tokens") or 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


def _envelope(req: ResponsesRequest, response_id: str, created: float, model: str,
              stored: bool) -> dict[str, Any]:
    """The response object's fields that echo the request."""
    return {"id": response_id, "object": "response", "created_at": created, "model": model,
            "status": "in_progress", "output": [], "error": None, "incomplete_details": None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "temperature": req.temperature, "top_p": req.top_p,
            "tools": req.tools or [], "tool_choice": req.tool_choice or "auto",
            "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
            "text": req.text or {"format": {"type": "text"}}, "metadata": req.metadata or {},
            "previous_response_id": req.previous_response_id,
            "conversation": {"id": req.conversation_id} if req.conversation is not None else None,
            "store": stored, "background": False,
            "truncation": req.truncation or "disabled", "usage": None}


def _finish(envelope: dict[str, Any], finish_reason: Optional[str]) -> None:
    if finish_reason == "length":
        envelope["status"] = "incomplete"
        envelope["incomplete_details"] = {"reason": "max_output_tokens"}
    elif finish_reason == "content_filter":
        envelope["status"] = "incomplete"
        envelope["incomplete_details"] = {"reason": "content_filter"}
    else:
        envelope["status"] = "completed"
        envelope["completed_at"] = time.time()


# Where each content part keeps its words.
_PART_TEXT = {"output_text": "text", "reasoning_text": "text", "refusal": "refusal"}


def _part(kind: str, text: str = "", logprobs: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    if kind == "output_text":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": list(logprobs)}
    return {"type": kind, _PART_TEXT[kind]: text}


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat choice's (or chunk choice's) token log probabilities as Responses writes them:
    chat's ``logprobs.content`` entries, already ``token`` / ``logprob`` / ``bytes`` /
    ``top_logprobs``; [] without them."""
    content = (choice.get("logprobs") or {}).get("content") or []
    return [{"token": e.get("token", ""), "logprob": e.get("logprob", 0.0), "bytes": e.get("bytes") or [],
             "top_logprobs": [{"token": t.get("token", ""), "logprob": t.get("logprob", 0.0),
                               "bytes": t.get("bytes") or []} for t in e.get("top_logprobs") or []]}
            for e in content]


def _message_item(text: str, status: str = "completed",
                  logprobs: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"type": "message", "id": _new_id("msg"), "status": status, "role": "assistant",
            "content": [_part("output_text", text, logprobs)]}


def _reasoning_item(text: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": _new_id("rs"), "summary": [],
            "content": [_part("reasoning_text", text)], "status": "completed"}


def _function_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": _new_id("fc"), "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def response_object(req: ResponsesRequest, chat: dict[str, Any], *, stored: bool = False) -> dict[str, Any]:
    """A chat completion as a ``response`` object; a Fusion answer's trace rides along as on chat.
    ``stored``: it is about to be stored (its ``store`` field says so)."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    envelope = _envelope(req, _new_id("resp"), chat.get("created") or time.time(), chat.get("model", req.model),
                         stored)
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        envelope["output"].append(_reasoning_item(reasoning))
    if message.get("content") or message.get("refusal") or not message.get("tool_calls"):
        item = _message_item(message.get("content") or "", logprobs=_logprobs(choice))
        if message.get("refusal"):
            # The gateway's refusals carry the text as content too (clients that read only the
            # text show it): the same two parts here, content first.
            parts = [_part("refusal", message["refusal"])]
            item["content"] = item["content"] + parts if message.get("content") else parts
        envelope["output"].append(item)
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        envelope["output"].append(_function_item(call.get("id") or _new_id("call"), function.get("name", ""),
                                                 function.get("arguments") or ""))
    _finish(envelope, choice.get("finish_reason"))
    envelope["usage"] = _usage(chat.get("usage"))
    if "fusion" in chat:
        envelope["fusion"] = chat["fusion"]
    return envelope


class ResponseEvents:
    """Chat chunks in, Responses stream events out (as SSE bytes). Items open as their first
    delta arrives and close when another kind begins or the stream ends, so every item a client
    sees added is also done before ``response.completed``."""

    def __init__(self, req: ResponsesRequest, model: str, stored: bool = False):
        self.envelope = _envelope(req, _new_id("resp"), time.time(), model, stored)
        self.sequence = 0
        self.open: Optional[dict[str, Any]] = None   # the item receiving deltas
        self.tool_items: dict[int, dict[str, Any]] = {}
        self.finish_reason: Optional[str] = None
        self.usage: Optional[dict[str, Any]] = None

    def _event(self, etype: str, **fields: Any) -> bytes:
        # Serialised at once: an event shows the response (or item) as it is now, and later
        # changes to it do not reach events already written.
        payload = {"type": etype, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {etype}\ndata: ".encode() + json_bytes(payload) + b"\n\n"

    def _begin(self, item: dict[str, Any]) -> list[bytes]:
        events = self._close()
        self.envelope["output"].append(item)
        self.open = item
        index = len(self.envelope["output"]) - 1
        shown = {**item, "status": "in_progress"}
        if item["type"] in ("message", "reasoning"):
            shown["content"] = []
        events.append(self._event("response.output_item.added", output_index=index, item=shown))
        if item["type"] in ("message", "reasoning"):
            events += self._begin_part(item, item["content"][0])
        return events

    def _begin_part(self, item: dict[str, Any], part: dict[str, Any]) -> list[bytes]:
        """``part`` is the newest of ``item``'s content parts; a client sees it added empty."""
        empty = {**part, _PART_TEXT[part["type"]]: ""}
        return [self._event("response.content_part.added", item_id=item["id"],
                            output_index=self.envelope["output"].index(item),
                            content_index=len(item["content"]) - 1, part=empty)]

    def _close_part(self, item: dict[str, Any]) -> list[bytes]:
        """The closing events of ``item``'s newest content part (earlier ones are closed)."""
        part, position = item["content"][-1], len(item["content"]) - 1
        kind, key = part["type"], _PART_TEXT[part["type"]]
        where = {"item_id": item["id"], "output_index": self.envelope["output"].index(item), "content_index": position}
        return [self._event(f"response.{kind}.done", **where, **{key: part[key]},
                            **({"logprobs": part["logprobs"]} if kind == "output_text" else {})),
                self._event("response.content_part.done", **where, part=part)]

    def _close(self) -> list[bytes]:
        item, self.open = self.open, None
        if item is None:
            return []
        index = self.envelope["output"].index(item)
        if item["type"] in ("message", "reasoning"):
            events = self._close_part(item)
        else:
            events = [self._event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, arguments=item["arguments"])]
        item["status"] = "completed"
        events.append(self._event("response.output_item.done", output_index=index, item=item))
        return events

    def _text(self, kind: str, delta: str, logprobs: Sequence[dict[str, Any]] = ()) -> list[bytes]:
        """A delta of a message's text or refusal (``kind``: a part type) or of reasoning;
        ``logprobs``: the text delta's token log probabilities."""
        item_type = "reasoning" if kind == "reasoning_text" else "message"
        events: list[bytes] = []
        if self.open is None or self.open["type"] != item_type:
            item = _message_item("") if item_type == "message" else _reasoning_item("")
            item["content"] = [_part(kind)]   # a refusal without text is a message of one refusal part
            events += self._begin(item)
        item = self.open
        if item["content"][-1]["type"] != kind:
            # A refusal after the text (or the reverse) is the message's next part.
            events += self._close_part(item)
            item["content"].append(_part(kind))
            events += self._begin_part(item, item["content"][-1])
        part = item["content"][-1]
        part[_PART_TEXT[kind]] += delta
        if kind == "output_text":
            part["logprobs"].extend(logprobs)
        events.append(self._event(f"response.{kind}.delta", item_id=item["id"],
                                  output_index=len(self.envelope["output"]) - 1,
                                  content_index=len(item["content"]) - 1, delta=delta,
                                  **({"logprobs": list(logprobs)} if kind == "output_text" else {})))
        return events

    def _tool_call(self, delta: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        position = delta.get("index", 0)
        function = delta.get("function") or {}
        item = self.tool_items.get(position)
        if item is None:
            item = _function_item(delta.get("id") or _new_id("call"), function.get("name") or "", "", "in_progress")
            self.tool_items[position] = item
            events += self._begin(item)
        arguments = function.get("arguments") or ""
        if arguments:
            item["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self.envelope["output"].index(item), delta=arguments))
        return events

    def start(self) -> list[bytes]:
        return [self._event("response.created", response=self.envelope),
                self._event("response.in_progress", response=self.envelope)]

    def feed(self, chunk: Chunk) -> list[bytes]:
        data = chunk.data
        if chunk.is_error:
            raise HorizonError(str((data.get("error") or {}).get("message") or "the stream failed on the server"))
        if data.get("usage"):
            self.usage = data["usage"]
        events: list[bytes] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                events += self._text("reasoning_text", reasoning)
            if delta.get("content"):
                events += self._text("output_text", delta["content"], _logprobs(choice))
            if delta.get("refusal"):
                events += self._text("refusal", delta["refusal"])
            for call in delta.get("tool_calls") or []:
                events += self._tool_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[bytes]:
        """The last items' closing events; the response is complete (see :meth:`end`)."""
        events = self._close()
        if not self.envelope["output"]:   # an empty answer is still one (empty) message
            events += self._begin(_message_item(""))
            events += self._close()
        _finish(self.envelope, self.finish_reason)
        self.envelope["usage"] = _usage(self.usage)
        return events

    def end(self) -> bytes:
        """The final event, carrying the whole response."""
        name = "response.completed" if self.envelope["status"] == "completed" else "response.incomplete"
        return self._event(name, response=self.envelope)

    def fail(self, exc: HorizonError) -> list[bytes]:
        body = exc.body()["error"]
        self.envelope["status"] = "failed"
        self.envelope["error"] = {"code": body.get("code") or "server_error", "message": body["message"]}
        return [self._event("error", code=body.get("code"), message=body["message"], param=body.get("param")),
                self._event("response.failed", response=self.envelope)]


async def response_events(req: ResponsesRequest, model: str, first: Chunk, rest: AsyncIterator[Chunk], *,
                          stored: bool = False, finish: Optional[Callable[[dict[str, Any]], Awaitable[None]]] = None
                          ) -> AsyncIterator[bytes]:
    """The Responses event stream of a chat stream whose first chunk is already in hand. A
    failure after the start ends the stream with ``error`` and ``response.failed``: what was
    sent cannot be taken back. ``stored``: the response is to be stored; ``finish`` stores the
    finished response and adds it to its conversation before the final event (so a client that
    continues it at once finds it), setting its ``store`` to what it could do."""
    events = ResponseEvents(req, model, stored=stored)
    for event in events.start():
        yield event
    try:
        for event in events.feed(first):
            yield event
        async for chunk in rest:
            for event in events.feed(chunk):
                yield event
    except HorizonError as exc:
        for event in events.fail(exc):
            yield event
        return
    except Exception:  # noqa: BLE001 — never a stack trace to the client
        log.exception("response stream failed after it started")
        for event in events.fail(HorizonError("the stream failed on the server")):
            yield event
        return
    for event in events.finish():
        yield event
    if finish is not None:
        await finish(events.envelope)
    yield events.end()
