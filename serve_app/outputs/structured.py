"""Structured outputs: ``response_format`` ``json_object`` / ``json_schema`` on every routed path.

Two kinds of path produce the answer:

* **engine-constrained**: a vLLM engine decodes under the JSON grammar itself (the request's
  ``response_format`` is passed through). The text is still parsed strictly and validated
  against the schema (cheap, and grammar backends do not enforce every schema keyword), but it
  is never "repaired": a grammar-decoded answer that does not parse was cut off, and guessing
  its end would invent data.
* **unconstrained**: Fusion synthesis, the simulated engine, any engine without structured
  decoding. The model is told what to produce (:func:`prepare_request`), its text goes through
  the shared :func:`serve_app.jsonutil.extract_json` (fences, outermost braces, light repairs)
  and is validated.

Either way an answer that fails gets ONE corrective retry (SPEC §7): the original
conversation, the bad answer, and an instruction naming the exact problem. Still failing ->
:class:`StructuredOutputError` (502 ``invalid_structured_output``) whose details keep the raw
text of every attempt for the trace. Invalid JSON is never returned as a finished answer; on
success the answer's content is the canonical JSON text of the parsed value. One exception, as
OpenAI's API has it: an answer cut at the token limit comes back as the engine gave it, with
``finish_reason: "length"`` (status ``truncated``). The limit is the client's, so a 502 would
blame the server, and clients retry a 5xx; the official SDK's ``parse()`` raises
``LengthFinishReasonError`` on that finish reason instead.

A bad schema is the client's error and is caught at the edge by :func:`contract_from_request`
(400), before any model runs.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Optional

from jsonschema import exceptions as schema_exceptions
from jsonschema import validators
from jsonschema.protocols import Validator

from ..errors import HorizonError, InvalidRequest, UpstreamError
from ..jsonutil import JSONExtractionError, extract_json
from ..messages.view import first_choice, first_message
from .decision_contract import append_system_text, apply_output_contract

__all__ = [
    "EnforcementResult", "OutputContract", "StructuredOutputError", "StructuredOutputPolicy",
    "apply_output_contract", "contract_from_request", "enforce", "enforce_detailed",
    "prepare_request",
]

ContractKind = Literal["json_object", "json_schema"]
RetryCall = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

# OpenAI's rule for json_schema.name.
_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class StructuredOutputError(UpstreamError):
    """The model did not produce the demanded JSON, even after the corrective retry."""

    code = "invalid_structured_output"


@dataclass(frozen=True)
class StructuredOutputPolicy:
    """Texts and limits of the enforcement; the defaults are what the profile ships with."""

    # Told to a model that cannot constrain its decoding. {requirement} is one of the two below.
    unconstrained_instruction: str = (
        "Answer with {requirement} and nothing else: no prose before or after it, no markdown "
        "code fences.")
    object_requirement: str = "one valid JSON object"
    schema_requirement: str = "one valid JSON value that conforms to this JSON Schema:\n{schema}"
    # The corrective follow-up turn. {problem} names the parse or validation error.
    retry_instruction: str = (
        "Your previous answer was rejected: {problem}. Reply again with only the corrected JSON "
        "({requirement}); no explanation and no code fences.")
    truncated_hint: str = " It was cut off at the token limit, so keep the answer shorter."
    # Raw model text kept per attempt in the error details (the trace); longer text is cut.
    raw_text_limit: int = 8000


DEFAULT_POLICY = StructuredOutputPolicy()


@dataclass(frozen=True)
class OutputContract:
    """What the client demanded through ``response_format``."""

    kind: ContractKind
    # The JSON Schema (json_schema only); checked against its metaschema on construction.
    schema: Optional[dict[str, Any]] = None
    name: Optional[str] = None
    strict: bool = False
    # The request the contract came from: the conversation the corrective retry continues when
    # the caller does not pass the request the model actually received.
    request: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _validator: Optional[Validator] = field(default=None, compare=False, repr=False)

    @property
    def expects(self) -> type:
        """What extract_json should look for: an object unless the schema's root says otherwise."""
        root = (self.schema or {}).get("type") if self.kind == "json_schema" else "object"
        if root == "array":
            return list
        if root in (None, "object") or (isinstance(root, list) and "object" in root):
            return dict
        return object

    def requirement(self, policy: StructuredOutputPolicy = DEFAULT_POLICY) -> str:
        if self.kind == "json_schema" and self.schema is not None:
            return policy.schema_requirement.format(
                schema=json.dumps(self.schema, ensure_ascii=False, separators=(",", ":")))
        return policy.object_requirement

    def problem_with(self, value: Any) -> Optional[str]:
        """Why ``value`` breaks the contract (the most relevant schema error), or None."""
        if self.kind == "json_object" or self.schema is None:
            return None if isinstance(value, dict) else f"expected a JSON object, got {type(value).__name__}"
        error = schema_exceptions.best_match(self._validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        return f"schema violation at {where}: {error.message[:300]}"


def checked_validator_class(schema: dict[str, Any], *, what: str, param: str,
                            code: Optional[str] = None) -> type[Validator]:
    """The validator class for a request-supplied JSON Schema (by its ``$schema``), once the
    schema is valid against that class's metaschema; else 400 naming ``param``."""
    validator_cls = validators.validator_for(schema)
    try:
        validator_cls.check_schema(schema)
    except schema_exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise InvalidRequest(f"{what}: not a valid JSON Schema"
                             f"{f' (at {where})' if where else ''}: {exc.message[:300]}",
                             param=param, code=code) from None
    return validator_cls


def contract_from_request(request: dict[str, Any]) -> Optional[OutputContract]:
    """The contract of a chat request, or None when it asks for plain text.

    Raises InvalidRequest (400, param ``response_format...``) for a malformed response_format
    or a JSON Schema that is not valid against its own metaschema.
    """
    fmt = request.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise InvalidRequest("response_format must be an object", param="response_format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputContract(kind="json_object", request=request)
    if kind != "json_schema":
        raise InvalidRequest(f"response_format.type {kind!r} is not supported; expected one of "
                             "'text', 'json_object', 'json_schema'", param="response_format.type")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidRequest("response_format.json_schema must be an object with 'name' and 'schema'",
                             param="response_format.json_schema")
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
        raise InvalidRequest("response_format.json_schema.name is required: 1-64 letters, digits, "
                             "underscores or dashes", param="response_format.json_schema.name")
    schema = spec.get("schema")
    if schema is None:
        # OpenAI allows a named format without a schema: any JSON object then.
        return OutputContract(kind="json_object", name=name, request=request)
    if not isinstance(schema, dict):
        raise InvalidRequest("response_format.json_schema.schema must be a JSON Schema object",
                             param="response_format.json_schema.schema")
    validator_cls = checked_validator_class(schema, what="response_format.json_schema.schema",
                                            param="response_format.json_schema.schema")
    validator = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)
    return OutputContract(kind="json_schema", schema=schema, name=name,
                          strict=bool(spec.get("strict", False)), request=request,
                          _validator=validator)


def prepare_request(contract: Optional[OutputContract], request: dict[str, Any], *,
                    engine_constrained: bool,
                    policy: StructuredOutputPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """The body to send for this contract. A constrained engine gets ``response_format`` as is
    (vLLM turns it into a grammar); an unconstrained one gets it removed and the requirement
    written into the system prompt instead, which is what makes a plain model answer in JSON."""
    if contract is None:
        return request
    if engine_constrained:
        return request
    body = {k: v for k, v in request.items() if k != "response_format"}
    instruction = policy.unconstrained_instruction.format(requirement=contract.requirement(policy))
    body["messages"] = append_system_text(list(request.get("messages") or []), instruction)
    return body


@dataclass
class Attempt:
    raw: str
    problem: Optional[str]
    model: Optional[str] = None
    finish_reason: Optional[str] = None

    def as_dict(self, limit: int) -> dict[str, Any]:
        return {"model": self.model, "finish_reason": self.finish_reason,
                "error": self.problem, "raw": self.raw[:limit]}


@dataclass
class EnforcementResult:
    response: dict[str, Any]
    # valid: as answered; repaired: extract_json fixed fences/braces/commas; retried: the
    # corrective retry produced it; tool_calls: the model called a tool, nothing to check;
    # truncated: the last answer was cut at the token limit and is returned as the engine gave
    # it (finish_reason "length"), as OpenAI's API does.
    status: Literal["valid", "repaired", "retried", "tool_calls", "truncated"]
    attempts: list[Attempt] = field(default_factory=list)


def _parse(contract: OutputContract, text: str, *, repair: bool) -> tuple[Any, Optional[str], bool]:
    """(value, problem, repaired). ``repaired`` means the text itself was not valid JSON."""
    if not isinstance(text, str) or not text.strip():
        return None, "the answer was empty", False
    try:
        return json.loads(text), None, False
    except json.JSONDecodeError as exc:
        strict_problem = f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:  # a degenerate answer ("[[[[..."): not an answer, not a crash
        strict_problem = "not valid JSON (nested too deep to parse)"
    if not repair:
        return None, strict_problem, False
    try:
        return extract_json(text, expect=contract.expects), None, True
    except JSONExtractionError:
        return None, strict_problem, False


def _check(contract: OutputContract, response: dict[str, Any], *, repair: bool) -> tuple[Attempt, Any, bool]:
    raw = first_message(response).get("content")
    raw_text = raw if isinstance(raw, str) else ""
    value, problem, repaired = _parse(contract, raw_text, repair=repair)
    if problem is None:
        problem = contract.problem_with(value)
    return (Attempt(raw=raw_text, problem=problem, model=response.get("model"),
                    finish_reason=first_choice(response).get("finish_reason")), value, repaired)


def _with_content(response: dict[str, Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(response)
    out["choices"][0]["message"]["content"] = json.dumps(value, ensure_ascii=False,
                                                         separators=(",", ":"))
    return out


def _summed_usage(first: dict[str, Any], second: dict[str, Any]) -> Optional[dict[str, Any]]:
    a, b = first.get("usage"), second.get("usage")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return b if isinstance(b, dict) else a
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {**b, **{k: int(a.get(k) or 0) + int(b.get(k) or 0) for k in keys}}


def corrective_request(contract: OutputContract, request: dict[str, Any], attempt: Attempt,
                       policy: StructuredOutputPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """The follow-up turn: the conversation so far, the rejected answer, and what was wrong."""
    problem = attempt.problem or "it did not match the requested format"
    if attempt.finish_reason == "length":
        problem += "." + policy.truncated_hint.rstrip(".")
    instruction = policy.retry_instruction.format(problem=problem,
                                                  requirement=contract.requirement(policy))
    messages = [*list(request.get("messages") or []),
                {"role": "assistant", "content": attempt.raw},
                {"role": "user", "content": instruction}]
    body = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    body["messages"] = messages
    return body


def _failure(contract: OutputContract, attempts: list[Attempt], policy: StructuredOutputPolicy,
             retry_error: Optional[HorizonError] = None) -> StructuredOutputError:
    last = attempts[-1]
    details: dict[str, Any] = {
        "response_format": contract.kind,
        "raw": last.raw[:policy.raw_text_limit],
        "attempts": [a.as_dict(policy.raw_text_limit) for a in attempts],
    }
    if contract.name:
        details["schema_name"] = contract.name
    message = f"the model's answer is not the requested {contract.kind}: {last.problem}"
    if retry_error is not None:
        details["retry_error"] = {"code": retry_error.code, "message": retry_error.message}
        message += f" (the corrective retry failed: {retry_error.message})"
    elif len(attempts) > 1:
        message += " (after one corrective retry)"
    return StructuredOutputError(message, details=details)


# How an answer of several choices reads in the header: the least direct of its choices.
_STATUS_RANK = {"tool_calls": 0, "valid": 1, "repaired": 2, "retried": 3, "truncated": 4}


async def enforce_detailed(contract: OutputContract, response: dict[str, Any],
                           retry: Optional[RetryCall], *, engine_constrained: bool,
                           request: Optional[dict[str, Any]] = None,
                           policy: StructuredOutputPolicy = DEFAULT_POLICY) -> EnforcementResult:
    """:func:`enforce`, also saying how the answer was obtained (for traces and headers).

    With ``n`` > 1 every choice is checked on its own; a choice that breaks the contract gets
    its own corrective retry (one choice), and the answer fails if any choice still does."""
    choices = response.get("choices") or []
    if len(choices) <= 1:
        return await _enforce_choice(contract, response, retry, engine_constrained=engine_constrained,
                                     request=request, policy=policy)
    base_request = {k: v for k, v in (request if request is not None else contract.request).items()
                    if k != "n"}
    results = []
    for choice in choices:
        single = {k: v for k, v in response.items() if k not in ("choices", "usage")}
        single["choices"] = [choice]
        results.append(await _enforce_choice(contract, single, retry, engine_constrained=engine_constrained,
                                             request=base_request, policy=policy))
    out = copy.deepcopy(response)
    out["choices"] = [{**r.response["choices"][0], "index": c.get("index", i)}
                      for i, (r, c) in enumerate(zip(results, choices))]
    usage = out.get("usage")
    for r in results:
        extra = r.response.get("usage") if r.status == "retried" else None
        usage = _summed_usage({"usage": usage}, {"usage": extra}) if extra else usage
    if usage is not None:
        out["usage"] = usage
    status = max((r.status for r in results), key=_STATUS_RANK.__getitem__)
    return EnforcementResult(out, status, [a for r in results for a in r.attempts])  # type: ignore[arg-type]


async def _enforce_choice(contract: OutputContract, response: dict[str, Any],
                          retry: Optional[RetryCall], *, engine_constrained: bool,
                          request: Optional[dict[str, Any]] = None,
                          policy: StructuredOutputPolicy = DEFAULT_POLICY) -> EnforcementResult:
    if first_message(response).get("tool_calls"):
        # A tool call is not the final answer; the contract applies to the turn after it.
        return EnforcementResult(response=response, status="tool_calls")
    repair = not engine_constrained
    attempt, value, repaired = _check(contract, response, repair=repair)
    attempts = [attempt]
    if attempt.problem is None:
        return EnforcementResult(_with_content(response, value),
                                 "repaired" if repaired else "valid", attempts)
    if retry is None:
        if attempt.finish_reason == "length":
            return EnforcementResult(response, "truncated", attempts)
        raise _failure(contract, attempts, policy)
    follow_up = corrective_request(contract, request if request is not None else contract.request,
                                   attempt, policy)
    try:
        second = await retry(follow_up)
    except HorizonError as exc:
        raise _failure(contract, attempts, policy, retry_error=exc) from exc
    attempt2, value2, _ = _check(contract, second, repair=repair)
    attempts.append(attempt2)
    if attempt2.problem is not None and attempt2.finish_reason != "length":
        raise _failure(contract, attempts, policy)
    truncated = attempt2.problem is not None
    result = copy.deepcopy(second) if truncated else _with_content(second, value2)
    usage = _summed_usage(response, second)
    if usage is not None:
        result["usage"] = usage
    return EnforcementResult(result, "truncated" if truncated else "retried", attempts)


async def enforce(contract: OutputContract, response: dict[str, Any],
                  retry: Optional[RetryCall], *, engine_constrained: bool,
                  request: Optional[dict[str, Any]] = None,
                  policy: StructuredOutputPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """The response with its content replaced by the canonical JSON text of the checked value.

    ``retry`` runs the corrective follow-up request (built here) on the same path; None = no
    retry. ``request`` is the body the model actually received (history merged, contract
    appended); it defaults to the request the contract was read from. Raises
    StructuredOutputError when the answer still breaks the contract, unless it was cut at the
    token limit: that answer is returned as the engine gave it (``finish_reason`` "length").
    """
    result = await enforce_detailed(contract, response, retry, engine_constrained=engine_constrained,
                                    request=request, policy=policy)
    return result.response
