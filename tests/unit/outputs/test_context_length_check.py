"""Context-length checks before any engine: 400 context_length_exceeded or a longer-context model."""

import re

import pytest

from serve_app.chat.context_length import (check_context, estimate_prompt_tokens,
                                           longer_context_alternative, route_for_context)
from serve_app.config.loader import ConfigError
from serve_app.errors import ContextLengthExceeded
from serve_app.messages.view import estimate_tokens

from outputs_fakes import profile


def request_of(tokens: int, **extra):
    """A one-message request the shared estimator puts at exactly ``tokens``."""
    overhead = estimate_tokens([{"role": "user", "content": ""}])
    return {"messages": [{"role": "user", "content": "abcd" * (tokens - overhead)}], **extra}


def test_estimate_is_the_shared_estimator():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "你好 world " * 50}]
    assert estimate_prompt_tokens(messages) == estimate_tokens(messages)
    assert estimate_prompt_tokens(request_of(700)["messages"]) == 700


def test_a_request_that_fits_passes():
    cfg = profile()
    check_context(cfg, "k2", request_of(900, max_tokens=100))  # exactly 1000


def test_prompt_over_the_limit_is_a_clean_400():
    cfg = profile()
    with pytest.raises(ContextLengthExceeded) as info:
        check_context(cfg, "k2", request_of(1200))
    err = info.value
    assert (err.status, err.code, err.param, err.type) == (400, "context_length_exceeded", "messages",
                                                           "invalid_request_error")
    assert "1000 tokens" in err.message and "1201" in err.message
    assert err.details == {"model": "k2", "max_model_len": 1000, "prompt_tokens": 1200,
                           "completion_tokens": 1}


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_completion_limit_counts(field):
    cfg = profile()
    check_context(cfg, "k2", request_of(800, **{field: 200}))
    with pytest.raises(ContextLengthExceeded) as info:
        check_context(cfg, "k2", request_of(800, **{field: 201}))
    # The prompt alone fits: the client's limit is what to lower, and the 400 names it.
    assert info.value.param == field
    with pytest.raises(ContextLengthExceeded) as info:
        check_context(cfg, "k2", request_of(1000, **{field: 10}))
    assert info.value.param == "messages"


def test_model_default_max_tokens_counts_when_the_request_sets_none():
    cfg = profile(models=[{"alias": "k2", "role": "coordinator", "max_model_len": 1000,
                           "sampling": {"max_tokens": 300}}])
    with pytest.raises(ContextLengthExceeded):
        check_context(cfg, "k2", request_of(800))
    check_context(cfg, "k2", request_of(800, max_tokens=50))


def test_alias_sharing_an_engine_is_bounded_by_that_engine():
    cfg = profile(models=[{"alias": "k2", "role": "coordinator", "max_model_len": 2048},
                          {"alias": "qwen-72b", "role": "chat", "max_model_len": 131072,
                           "shares_engine_with": "k2"}])
    assert cfg.context_limit("qwen-72b") == 2048
    with pytest.raises(ContextLengthExceeded):
        check_context(cfg, "qwen-72b", request_of(3000))


@pytest.mark.parametrize("models, where", [
    ([{"alias": "k2", "role": "coordinator", "max_model_len": 1000, "sampling": {"max_tokens": 1000}}],
     "models[0].sampling.max_tokens"),
    # Bounded by the engine it shares: 2,048, not its own 131,072.
    ([{"alias": "k2", "role": "coordinator", "max_model_len": 2048},
      {"alias": "qwen-72b", "role": "chat", "max_model_len": 131072, "shares_engine_with": "k2",
       "sampling": {"max_tokens": 4096}}], "models[1].sampling.max_tokens"),
])
def test_a_default_answer_length_that_fills_the_window_fails_at_load_naming_it(models, where):
    # Added to every request that sets no max_tokens, it would make each of them a 400 telling
    # the client to lower a max_tokens it never sent.
    with pytest.raises(ConfigError, match=re.escape(where) + ".*leave no room for a prompt"):
        profile(models=models)


def test_alternative_is_the_first_chain_model_that_fits():
    cfg = profile()
    # reasoning: r1-distill (2000) -> k2 (1000) -> qwen-72b (4000)
    assert longer_context_alternative(cfg, "reasoning", "r1-distill", 3000) == "qwen-72b"
    assert longer_context_alternative(cfg, "reasoning", "r1-distill", 900) == "k2"
    # The requested model itself is never the alternative, wherever it sits in the chain.
    assert longer_context_alternative(cfg, "chat", "k2", 3000) == "qwen-72b"


def test_no_alternative_when_off_missing_or_too_long():
    assert longer_context_alternative(profile(context_fallback=False), "reasoning", "r1-distill", 3000) is None
    assert longer_context_alternative(profile(), "summary", "qwen-72b", 100) is None  # no chain
    assert longer_context_alternative(profile(), None, "qwen-72b", 100) is None
    assert longer_context_alternative(profile(), "code", "coder", 3000) is None  # k2 holds 1000


def test_unserved_models_in_a_chain_are_skipped():
    cfg = profile(models=[{"alias": "k2", "role": "coordinator", "max_model_len": 1000},
                          {"alias": "r1-distill", "role": "reasoning", "max_model_len": 500},
                          {"alias": "coder", "role": "code", "max_model_len": 500}],
                  unavailable=[{"alias": "qwen-72b", "role": "chat", "reason": "not on this box"}])
    assert longer_context_alternative(cfg, "reasoning", "r1-distill", 800) == "k2"
    assert longer_context_alternative(cfg, "reasoning", "r1-distill", 1500) is None


def test_route_keeps_a_fitting_request_on_its_model():
    route = route_for_context(profile(), "reasoning", "r1-distill", request_of(500))
    assert (route.model, route.rerouted, route.prompt_tokens) == ("r1-distill", False, 500)


def test_route_moves_an_over_long_request_to_a_longer_context():
    route = route_for_context(profile(), "reasoning", "r1-distill", request_of(2500, max_tokens=100))
    assert (route.model, route.requested, route.rerouted) == ("qwen-72b", "r1-distill", True)


def test_route_without_alternative_raises_naming_the_requested_model():
    with pytest.raises(ContextLengthExceeded) as info:
        route_for_context(profile(), "reasoning", "r1-distill", request_of(5000))
    assert info.value.details["model"] == "r1-distill"
    with pytest.raises(ContextLengthExceeded):
        route_for_context(profile(context_fallback=False), "reasoning", "r1-distill", request_of(2500))


def test_context_fallback_defaults_on():
    from serve_app.config.resilience import ResilienceSettings
    assert ResilienceSettings().context_fallback is True
