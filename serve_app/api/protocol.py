"""Validation of OpenAI request bodies at the edge.

Only what the graph relies on is typed strictly (messages, roles, content parts, token limits,
streaming flags); any other OpenAI/vLLM sampling field passes through untouched to the engine.
A validation failure becomes a 400 naming the parameter (``messages[1].content[0].type``), never
FastAPI's default 422 shape.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError,
                      field_validator, model_validator)

from serve_app.chat.completions import CompletionCall
from serve_app.chat.context import ChatCall
from serve_app.config.loader import format_loc
from serve_app.errors import InvalidRequest
from serve_app.json_wire import JSONDecodeError, loads, nests_deeper_than


class OpenBody(BaseModel):
    # OpenAI keeps adding fields; unknown ones are passed through to the engine.
    model_config = ConfigDict(extra="allow")


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageURL(OpenBody):
    url: str = Field(..., min_length=1)
    detail: Optional[Literal["auto", "low", "high"]] = None


class TextPart(_Closed):
    type: Literal["text"]
    text: str


class ImagePart(_Closed):
    type: Literal["image_url"]
    image_url: ImageURL


class RefusalPart(_Closed):
    type: Literal["refusal"]
    refusal: str


ContentPart = Union[TextPart, ImagePart, RefusalPart]
_PART_TYPES = {"text": TextPart, "image_url": ImagePart, "refusal": RefusalPart}


class ToolCallFunction(OpenBody):
    name: str
    arguments: str = ""


class ToolCall(OpenBody):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class Message(OpenBody):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Optional[Union[str, list[dict[str, Any]]]] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None

    @field_validator("content")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        # Content parts are checked one by one so the error names the exact part and field.
        if isinstance(value, list):
            for i, part in enumerate(value):
                if not isinstance(part, dict):
                    raise _PartError(f"{i}", "a content part must be an object")
                ptype = part.get("type")
                model = _PART_TYPES.get(ptype) if isinstance(ptype, str) else None
                if model is None:
                    raise _PartError(f"{i}.type", f"unknown content part type {ptype!r}; "
                                     f"expected one of {sorted(_PART_TYPES)}")
                try:
                    model.model_validate(part)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    raise _PartError(f"{i}.{format_loc(tuple(err['loc']))}", err["msg"]) from None
        return value

    @model_validator(mode="after")
    def _role_fields(self) -> "Message":
        # What OpenAI's API requires of a role, which vLLM would let through: a tool result
        # without the call it answers, or a user / system turn without content, reached the
        # model as a turn it could not make sense of.
        if self.role == "tool" and not self.tool_call_id:
            raise _MessageFieldError("tool_call_id", "is required for a tool message (the id of the call it answers)")
        if self.role in ("user", "system", "developer") and self.content is None:
            raise _MessageFieldError("content", f"is required for a {self.role} message")
        return self


class _MessageFieldError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


class _PartError(ValueError):
    def __init__(self, sub: str, message: str):
        super().__init__(message)
        self.sub = sub
        self.message = message


class StreamOptions(OpenBody):
    include_usage: bool = False


class ChatCompletionRequest(OpenBody):
    model: str = Field(..., min_length=1)
    messages: list[Message] = Field(..., min_length=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1)
    temperature: Optional[StrictFloat] = Field(None, ge=0, le=2)
    top_p: Optional[StrictFloat] = Field(None, gt=0, le=1)
    # Choices per request: passed to the engine, up to global.server.max_n (checked by the
    # chat pipeline, which knows the profile); Fusion answers one synthesis (n must be 1).
    n: Optional[StrictInt] = Field(None, ge=1)
    # Checked here with OpenAI's bounds, not only by the engine: a simulated engine has no
    # bound, and the error comes before any model call.
    logprobs: Optional[StrictBool] = None
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=20)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    response_format: Optional[dict[str, Any]] = None
    plugins: Optional[list[dict[str, Any]]] = None
    user: Optional[str] = None

    @field_validator("top_logprobs")
    @classmethod
    def _alternatives_need_logprobs(cls, value: Optional[int], info) -> Optional[int]:
        if value and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def engine_body(self) -> dict[str, Any]:
        """The dict sent to a model: everything but the routing-only fields."""
        body = self.model_dump(exclude_none=True, exclude={"model", "plugins", "stream", "stream_options"})
        return body

    def to_call(self, drop_oldest_to_fit: bool = False) -> ChatCall:
        """The request as the chat pipeline takes it (no HTTP, no pydantic)."""
        return ChatCall(model=self.model, body=self.engine_body(), stream=self.stream,
                        include_usage=self.include_usage, plugins=self.plugins,
                        drop_oldest_to_fit=drop_oldest_to_fit)


class CompletionRequest(OpenBody):
    """``POST /v1/completions``: a prompt (text, texts, or token ids for a fleet model)."""

    model: str = Field(..., min_length=1)
    prompt: Union[str, list[str], list[int], list[list[int]]]
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    temperature: Optional[StrictFloat] = Field(None, ge=0, le=2)
    top_p: Optional[StrictFloat] = Field(None, gt=0, le=1)
    n: Optional[StrictInt] = Field(None, ge=1)
    user: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def _no_messages(cls, data: Any) -> Any:
        # A chat body sent to the wrong endpoint must not pass through to the engine silently.
        if isinstance(data, dict) and "messages" in data:
            raise _CompletionsError("messages", "a completions request takes 'prompt'; 'messages' "
                                    "belong to /v1/chat/completions" + (
                                        "" if "prompt" not in data else " (send one or the other)"))
        return data

    @field_validator("prompt")
    @classmethod
    def _prompt_not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be empty")
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def to_call(self) -> CompletionCall:
        body = self.model_dump(exclude_none=True, exclude={"model", "stream", "stream_options"})
        return CompletionCall(model=self.model, body=body, stream=self.stream,
                              include_usage=self.include_usage)


class _CompletionsError(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


MAX_EMBEDDING_INPUTS = 2048


class EmbeddingRequest(OpenBody):
    model: str = Field(..., min_length=1)
    input: Union[str, list[str]]
    # The official client asks for base64 (packed little-endian float32) by default.
    encoding_format: Literal["float", "base64"] = "float"
    # OpenAI's shortened embeddings: only the model's own size is served (see Embeddings).
    dimensions: Optional[StrictInt] = Field(None, ge=1)
    # vLLM's extension: cut a text longer than the model embeds (-1: to the model's limit;
    # k: to k tokens) instead of refusing it; ``truncation_side`` says which end goes.
    truncate_prompt_tokens: Optional[StrictInt] = None
    truncation_side: Literal["left", "right"] = "right"

    @field_validator("truncate_prompt_tokens")
    @classmethod
    def _minus_one_or_positive(cls, value: Optional[int]) -> Optional[int]:
        if value is not None and value != -1 and value < 1:
            raise ValueError("must be -1 (the model's limit) or a number of tokens ≥ 1")
        return value

    @field_validator("input", mode="before")
    @classmethod
    def _text_not_token_ids(cls, value: Any) -> Any:
        # Token ids from a client are its own tokenizer's (LangChain's OpenAIEmbeddings sends
        # tiktoken's by default), not the embedding model's: embedding them would give noise.
        if isinstance(value, list) and any(isinstance(item, (int, list)) for item in value):
            raise ValueError("token ids are not accepted: send text, the model tokenizes it (with "
                             "LangChain's OpenAIEmbeddings, set check_embedding_ctx_length=False)")
        return value

    @field_validator("input")
    @classmethod
    def _non_empty(cls, value: Union[str, list[str]]) -> Union[str, list[str]]:
        if isinstance(value, list) and not value:
            raise ValueError("input must not be empty")
        if isinstance(value, list) and len(value) > MAX_EMBEDDING_INPUTS:
            # OpenAI's limit; it also bounds an answer's size (2,048 BGE-M3 vectors: 8 MiB).
            raise ValueError(f"at most {MAX_EMBEDDING_INPUTS} inputs per request, got {len(value)}; "
                             "send them in several requests")
        return value

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def error_param(err: dict[str, Any]) -> tuple[str, str]:
    """A pydantic error as (the parameter path a client sent, a message about it)."""
    loc = tuple(err.get("loc", ()))
    cause = (err.get("ctx") or {}).get("error")
    # Drop union-member tags pydantic puts in the location (e.g. 'str', 'list[dict[str,any]]').
    loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"str", "int"})))
    param = format_loc(loc)
    msg = err.get("msg", "invalid value")
    if isinstance(cause, _CompletionsError):
        return cause.param, cause.message
    if isinstance(cause, _MessageFieldError):
        return f"{param}.{cause.field}", cause.message
    if isinstance(cause, _PartError):
        param = f"{param}[{cause.sub.split('.', 1)[0]}]" + (
            "." + cause.sub.split(".", 1)[1] if "." in cause.sub else "")
        msg = cause.message
    elif err.get("type") == "missing":
        msg = "is required"
    return param, msg.removeprefix("Value error, ")


def parse_model(model_cls: type[BaseModel], raw: bytes, max_depth: Optional[int] = None) -> Any:
    """Decode and validate a JSON body, raising InvalidRequest that names the parameter.
    ``max_depth``: the deepest nesting accepted (``global.server.max_json_depth``)."""
    try:
        data = loads(raw)
    except (JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_json")
    if max_depth is not None and nests_deeper_than(data, max_depth):
        raise InvalidRequest(f"the request body nests objects and arrays more than {max_depth} levels deep "
                             "(global.server.max_json_depth)", code="invalid_json")
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A union failure lists every member; report the most specific (longest) location.
        err = max(errors, key=lambda e: len(e.get("loc", ())))
        param, msg = error_param(err)
        raise InvalidRequest(f"invalid value for '{param}': {msg}", param=param,
                             code="invalid_value") from None


# OpenAI's bounds on a ``metadata`` map (Responses, Conversations): pairs, key and value lengths.
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


def checked_metadata(metadata: Optional[dict[str, Any]]) -> dict[str, str]:
    """A client's ``metadata`` within OpenAI's bounds (it is stored with the response or
    conversation, so unbounded maps would grow the store); else a 400 naming the key."""
    metadata = metadata or {}
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequest(f"'metadata' holds at most {MAX_METADATA_PAIRS} pairs, got {len(metadata)}",
                             param="metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY or not isinstance(value, str) or len(value) > MAX_METADATA_VALUE:
            raise InvalidRequest(f"'metadata.{key}': keys are at most {MAX_METADATA_KEY} characters and "
                                 f"values strings of at most {MAX_METADATA_VALUE}", param=f"metadata.{key}")
    return dict(metadata)
