"""Panel answers are budgeted into the judge's context window, fairly, and recorded."""

import dataclasses

import pytest

from serve_app.config.fusion import FusionParams
from serve_app.errors import ContextLengthExceeded
from serve_app.fusion import FusionLooper, FusionPolicy
from serve_app.fusion.budget import (CUT_MARKER, answer_reserve, completion_room, cut_text, fair_shares,
                                     fit_answers)
from serve_app.messages.view import estimate_text_tokens

from fusion_fakes import FakeModel, is_analysis_prompt, prompt_of, run, standard_fleet

PANEL = ["qwen-72b", "r1-distill", "coder"]


def policy(window, judge_max_tokens=None, **params) -> FusionPolicy:
    base = FusionPolicy.from_params("panel", FusionParams(model="k2", **params), PANEL)
    return dataclasses.replace(base, judge_context_tokens=window, judge_max_tokens=judge_max_tokens)


def words(n: int, word: str = "alpha") -> str:
    return " ".join([word] * n)


# ---------------------------------------------------------------- the arithmetic
def test_fair_shares_keep_short_answers_whole_and_cut_long_ones_to_one_level():
    assert fair_shares([10, 500, 800], 410) == [10, 200, 200]
    assert fair_shares([10, 20, 30], 100) == [10, 20, 30]          # everything fits: untouched
    assert fair_shares([300, 300, 300], 300) == [100, 100, 100]   # equal answers, equal shares
    assert sum(fair_shares([7, 900, 1000, 50], 333)) <= 333


def test_cut_text_respects_the_share_and_says_what_it_left_out():
    text = words(400)
    total = estimate_text_tokens(text)
    cut = cut_text(text, 100, total)
    assert cut.endswith(CUT_MARKER.format(cut=total - 100, total=total))
    assert estimate_text_tokens(cut.split(" […]")[0]) <= 100
    assert cut_text("short", 50, 2) == "short"


def test_fit_answers_records_each_member_before_and_after():
    fitted = fit_answers([words(10), words(600), words(900)], PANEL, [0, 1, 2], 400)
    members = {m.model: m for m in fitted.members}
    assert not members["qwen-72b"].cut and members["qwen-72b"].kept_tokens == members["qwen-72b"].tokens
    assert members["r1-distill"].cut and members["coder"].cut
    assert members["r1-distill"].kept_tokens == members["coder"].kept_tokens
    assert sum(m.kept_tokens for m in fitted.members) <= 400


def test_judge_max_tokens_default_to_what_the_window_leaves():
    assert completion_room(2048, 1500, None, None) == 2048 - 1500 - 48
    assert completion_room(2048, 500, 128, None) == 128            # the request's limit wins
    assert completion_room(2048, 500, None, 256) == 256            # else the model's default
    assert answer_reserve(2048, None, None) == 256
    assert answer_reserve(512, 4000, None) == 256                  # at most half the window


# ---------------------------------------------------------------- through the looper
def talkative_fleet(answer_words: int):
    return standard_fleet(**{m: FakeModel(m, words(answer_words, m.replace("-", ""))) for m in PANEL})


def test_long_answers_are_cut_so_both_judge_prompts_fit_the_window():
    window = 1200
    fleet = talkative_fleet(700)          # each answer fits alone, the three together do not
    out = run(FusionLooper(fleet).run({"messages": [{"role": "user", "content": "Why?"}]},
                                      policy(window, judge_max_tokens=200)))
    calls = fleet.models["k2"].calls
    assert len(calls) == 2 and is_analysis_prompt(calls[0])
    for call in calls:
        prompt_tokens = estimate_text_tokens(prompt_of(call))
        assert prompt_tokens + call["max_tokens"] <= window
        assert "cut to fit the judge's context" in prompt_of(call)
    budget = out.trace["context_budget"]
    assert budget["judge_window_tokens"] == window
    cut = [m for m in budget["synthesis"]["members"] if m["cut"]]
    assert len(cut) == 3 and len({m["kept_tokens"] for m in cut}) == 1


def test_answers_that_fit_are_passed_whole_and_synthesis_gets_the_room_left():
    fleet = standard_fleet()
    out = run(FusionLooper(fleet).run({"messages": [{"role": "user", "content": "Capital?"}]},
                                      policy(2048)))
    final = fleet.models["k2"].calls[-1]
    assert "cut to fit" not in prompt_of(final)
    assert final["max_tokens"] == 2048 - estimate_text_tokens(prompt_of(final)) - 48
    assert not any(m["cut"] for m in out.trace["context_budget"]["synthesis"]["members"])


def test_a_conversation_the_judge_cannot_read_fails_before_the_panel_runs():
    fleet = standard_fleet()
    with pytest.raises(ContextLengthExceeded) as info:
        run(FusionLooper(fleet).run({"messages": [{"role": "user", "content": words(3000)}]},
                                    policy(1024)))
    assert info.value.param == "messages"
    assert all(not fleet.models[m].calls for m in PANEL)


def test_without_a_known_window_nothing_is_budgeted():
    fleet = talkative_fleet(700)
    out = run(FusionLooper(fleet).run({"messages": [{"role": "user", "content": "Why?"}]},
                                      policy(None)))
    assert "context_budget" not in out.trace
    assert "max_tokens" not in fleet.models["k2"].calls[-1]


def test_resolve_policy_takes_the_window_and_default_from_the_judge_model():
    from serve_app.config.loader import load_config
    from serve_app.fusion.policy import resolve_policy

    cfg = load_config("configs/local.yaml")
    request = {"model": "vllm-sr/fusion", "messages": [{"role": "user", "content": "x"}]}
    plugin = {"id": "fusion", "model": "k2", "analysis_models": PANEL}
    resolved = resolve_policy(cfg, None, plugin, {**request, "plugins": [plugin]})
    assert resolved.judge_context_tokens == cfg.model("k2").engine.max_model_len
    assert resolved.judge_max_tokens == cfg.model("k2").sampling.max_tokens


def test_the_analysis_call_is_constrained_to_the_prompt_sets_schema():
    import jsonschema

    from serve_app.fusion.templates import PromptTemplates

    schema = PromptTemplates().get("fusion-v1").analysis_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["required"]) == {"consensus", "contradictions", "partial_coverage",
                                       "unique_insights", "blind_spots"}
    fleet = standard_fleet()
    out = run(FusionLooper(fleet).run({"messages": [{"role": "user", "content": "Capital?"}]}, policy(2048)))
    analysis_call, synthesis_call = fleet.models["k2"].calls
    fmt = analysis_call["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == schema
    assert "response_format" not in synthesis_call           # the final call stays free text
    assert out.trace["analysis"].get("parse_failed") is not True
    # The schema's bounds fit the analysis reserve: it is never cut for room.
    assert analysis_call["max_tokens"] >= 384
