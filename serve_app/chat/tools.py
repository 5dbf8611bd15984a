"""Checks of a request's tools, tool_choice and n, and of who may answer a tool request.

Run before routing (the intent classifier is a model call): a malformed tool or ``tool_choice``,
or ``n`` above the profile's limit, is a 400 naming the parameter before any model runs. After
routing, a request that *uses* tools (tools present, ``tool_choice`` not ``none``) must reach a
model with tool calling (``models[].tool_calling``, the engine's); a decision may refuse such
requests (``tool_requests: refuse``); a Fusion judge is checked before its panel runs.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ..config.routing import Decision
from ..config.schema import HorizonConfig
from ..errors import InvalidRequest
from ..outputs.structured import checked_validator_class

# OpenAI's rule for function names.
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CHOICE_WORDS = ("none", "auto", "required")


def check_n(cfg: HorizonConfig, body: dict[str, Any]) -> None:
    n = body.get("n")
    limit = cfg.global_.server.max_n
    if n is not None and n > limit:
        raise InvalidRequest(f"n = {n} is above this gateway's maximum of {limit} choices per "
                             "request (global.server.max_n)", param="n", code="invalid_value")


def _check_schema(schema: Any, param: str) -> None:
    if not isinstance(schema, dict):
        raise InvalidRequest("a tool's parameters must be a JSON Schema object", param=param)
    checked_validator_class(schema, what="the tool's parameters", param=param, code="invalid_value")


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [str((t.get("function") or {}).get("name")) for t in tools]


def check_tools(body: dict[str, Any]) -> None:
    """``tools`` are functions with a valid name and a valid JSON Schema for their parameters;
    ``tool_choice`` is none / auto / required or names one of them (400 naming the parameter)."""
    tools = body.get("tools")
    if tools is not None:
        seen: set[str] = set()
        for i, tool in enumerate(tools):
            if tool.get("type", "function") != "function":
                raise InvalidRequest(f"unsupported tool type {tool.get('type')!r}; expected 'function'",
                                     param=f"tools[{i}].type")
            fn = tool.get("function")
            if not isinstance(fn, dict):
                raise InvalidRequest("a function tool needs a 'function' object", param=f"tools[{i}].function")
            name = fn.get("name")
            if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                raise InvalidRequest("a function name is 1-64 letters, digits, underscores or dashes",
                                     param=f"tools[{i}].function.name")
            if name in seen:
                raise InvalidRequest(f"two tools are named {name!r}", param=f"tools[{i}].function.name")
            seen.add(name)
            if "parameters" in fn and fn["parameters"] is not None:
                _check_schema(fn["parameters"], f"tools[{i}].function.parameters")
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in _CHOICE_WORDS:
            raise InvalidRequest(f"tool_choice {choice!r} is not one of {list(_CHOICE_WORDS)} or a "
                                 "named function", param="tool_choice")
        if choice == "required" and not tools:
            raise InvalidRequest("tool_choice 'required' needs tools", param="tool_choice")
        return
    fn = choice.get("function") if choice.get("type", "function") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidRequest("a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                             param="tool_choice")
    if name not in tool_names(tools or []):
        raise InvalidRequest(f"tool_choice names the function {name!r}, which is not in tools "
                             f"({', '.join(tool_names(tools or [])) or 'none given'})", param="tool_choice")


def uses_tools(body: dict[str, Any]) -> bool:
    """A request that may be answered with tool calls: tools given, tool_choice not none."""
    return bool(body.get("tools")) and body.get("tool_choice") != "none"


def check_decision_takes_tools(decision: Optional[Decision], body: dict[str, Any]) -> None:
    if decision is not None and uses_tools(body) and decision.tool_requests == "refuse":
        raise InvalidRequest(f"the request was routed to decision {decision.name!r}, which does not "
                             "take requests with tools (tool_requests: refuse); send it without "
                             "tools or to a model with tool calling", param="tools",
                             code="tools_not_supported")


def check_model_takes_tools(cfg: HorizonConfig, alias: str, body: dict[str, Any], *,
                            role: str = "model") -> None:
    """400 naming ``alias`` when the request uses tools and its engine has no tool calling."""
    if uses_tools(body) and cfg.tool_calling(alias) is None:
        owner = cfg.engine_owner(alias).alias
        why = "" if owner == alias else f" (it is served by {owner!r}'s engine)"
        raise InvalidRequest(f"{role} {alias!r} has no tool calling{why}, so it cannot answer a "
                             "request with tools; send tool_choice 'none', drop the tools, or use a "
                             "model whose profile entry has tool_calling", param="tools",
                             code="tools_not_supported")


def fit_to_model(cfg: HorizonConfig, alias: str, body: dict[str, Any]) -> dict[str, Any]:
    """A model whose engine makes one call per answer gets ``parallel_tool_calls: false``."""
    settings = cfg.tool_calling(alias)
    if uses_tools(body) and settings is not None and not settings.parallel_calls \
            and body.get("parallel_tool_calls") is None:
        return {**body, "parallel_tool_calls": False}
    return body
