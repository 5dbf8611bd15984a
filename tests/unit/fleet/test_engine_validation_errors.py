"""A body vLLM's request model refuses is a 400 that names the parameter, in one readable line.

Found on the embedded default: ``"stop": ["a", "b", "c", "d", "e"]`` came back as pydantic's
multi-line dump cut at 300 characters ("... List should have at most 4 items after "), with
``param: null``; vLLM's own 400s name the parameter only inside their text.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from ray.serve.llm.openai_api_models import ChatCompletionRequest

from deployments.vllm_server import validation_error
from serve_app.errors import InvalidRequest
from serve_app.fleet.errors import engine_error

HI = [{"role": "user", "content": "hi"}]


def _refused(**fields) -> dict:
    body = {"model": "k2", "messages": HI, **fields}
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest(**body)
    return validation_error(info.value, body)


def test_a_union_field_names_the_parameter_and_what_each_member_wanted():
    error = _refused(stop=["a", "b", "c", "d", "e"])
    assert error["param"] == "stop" and error["code"] == 400
    assert error["message"] == ("invalid value for 'stop': Input should be a valid string; "
                                "or List should have at most 4 items after validation, not 5")


def test_a_plain_field_is_one_message_without_pydantics_type_names_or_links():
    error = _refused(seed="x")
    assert error["param"] == "seed"
    assert "valid integer" in error["message"]
    assert "pydantic.dev" not in error["message"] and "[type=" not in error["message"]


def test_a_message_of_the_wrong_shape_keeps_the_errors_about_its_content():
    error = _refused(messages=[{"role": "user", "content": 5}])
    assert error["param"] == "messages[0]"
    assert "valid string" in error["message"] and "'developer'" not in error["message"]


def test_the_gateway_passes_the_engines_param_on():
    exc = engine_error("k2", {"error": _refused(stop=5)})
    assert isinstance(exc, InvalidRequest) and exc.status == 400 and exc.param == "stop"
    assert exc.message.startswith("model 'k2' rejected the request: invalid value for 'stop'")


def test_a_vllm_message_that_names_its_parameter_inside_the_text_sets_param():
    exc = engine_error("k2", {"error": {"code": 400, "message": (
        "logit_bias contains key(s) that cannot be converted to integer token IDs: ['abc'] "
        "(parameter=logit_bias, value=['abc'])")}})
    assert exc.param == "logit_bias"
    assert engine_error("k2", {"error": {"code": 400, "message": "something odd"}}).param is None


def test_an_engines_500_is_one_requests_failure_unless_its_engine_core_died():
    from serve_app.errors import EngineRequestFailed, ModelUnavailable, UpstreamError
    from serve_app.resilience.breaker import is_model_failure

    # vLLM's GenerationError: one request failed inside the engine (here xgrammar refused
    # the schema); the engine serves the next request.
    one = engine_error("k2", {"error": {"code": 500, "type": "InternalServerError",
                                        "message": "Internal server error"}})
    assert isinstance(one, EngineRequestFailed) and one.status == 502
    # vLLM's EngineDeadError: every request fails until Serve replaces the replica, so the
    # model is unavailable (a 503 with Retry-After that its breaker counts), said plainly.
    dead = engine_error("k2", {"error": {"code": 500, "type": "InternalServerError", "message": (
        "EngineCore encountered an issue. See stack trace (above) for the root cause.")}})
    assert type(dead) is ModelUnavailable and dead.status == 503 and dead.retry_after == 10
    assert dead.message == "model 'k2' is unavailable: its engine stopped; Ray Serve is replacing the replica"
    assert is_model_failure(dead)
    assert type(engine_error("k2", {"error": {"code": 503, "message": "busy"}})) is UpstreamError


def test_vllms_one_request_exceptions_raised_through_ray_are_one_requests_failure():
    from serve_app.errors import EngineRequestFailed, UpstreamError
    from serve_app.fleet.errors import map_ray_error

    class GenerationError(Exception):       # vLLM's, raised in the replica for a complete answer
        pass

    class RetryableRequestError(GenerationError):
        pass

    class RayTaskError(Exception):           # how a handle call carries it
        def __init__(self, cause):
            super().__init__(f"ray::replica failed\n{cause}")
            self.cause = cause

    failed = map_ray_error("k2", RayTaskError(GenerationError("Internal server error")))
    assert isinstance(failed, EngineRequestFailed) and "failed on this request: Internal server error" in failed.message
    assert type(map_ray_error("k2", RayTaskError(RetryableRequestError("retry")))) is UpstreamError
    assert type(map_ray_error("k2", RayTaskError(RuntimeError("EngineCore died")))) is UpstreamError



def test_an_engine_that_died_raised_through_ray_is_the_model_unavailable_not_a_tuple_of_vllms_text():
    # Seen on the embedded default with the engine core killed mid-request: a 502 "model 'k2'
    # failed: ('EngineCore encountered an issue. See stack trace (above) ...', 'EngineCore ...')".
    from serve_app.errors import ModelUnavailable
    from serve_app.fleet.errors import map_ray_error

    message = "EngineCore encountered an issue. See stack trace (above) for the root cause."

    class EngineDeadError(Exception):        # vLLM's; pickled through Ray it holds its text twice
        pass

    class RayTaskError(Exception):
        def __init__(self, cause):
            super().__init__(f"ray::replica failed\n{cause}")
            self.cause = cause

    error = map_ray_error("k2", RayTaskError(EngineDeadError(message, message)))
    assert type(error) is ModelUnavailable and error.status == 503 and error.retry_after == 10
    assert "See stack trace" not in error.message and "its engine stopped" in error.message
