"""Grounding: agreement scores from the embedding client, the three policies, failure modes."""

import numpy as np
import pytest

from serve_app.config.fusion import FusionParams
from serve_app.errors import ModelUnavailable
from serve_app.fusion import FusionLooper, FusionPolicy
from serve_app.fusion.grounding import agreement_scores

from fusion_fakes import FakeEmbedder, FakeModel, prompt_of, run, standard_fleet

PANEL = ["qwen-72b", "r1-distill", "coder"]
OUTLIER = "Bananas grow on tall herbaceous plants in tropical climates."


def policy(**grounding) -> FusionPolicy:
    params = FusionParams(model="k2", min_successful_responses=1,
                          grounding={"enabled": True, **grounding})
    return FusionPolicy.from_params("panel", params, PANEL)


def request(system: str | None = None):
    messages = [{"role": "user", "content": "Capital of France?"}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return {"model": "vllm-sr/fusion", "messages": messages}


def outlier_fleet(**kw):
    return standard_fleet(coder=FakeModel("coder", OUTLIER), **kw)


def scores_of(out):
    return {r["model"]: r for r in out.trace["grounding"]["responses"]}


def test_agreement_scores_math():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    scores, panel, context, used = agreement_scores(vectors, None, "panel", 0.5)
    assert used == "panel" and context == [None, None, None]
    assert panel == pytest.approx([0.5, 0.5, 0.0])
    hybrid, _, ctx, used = agreement_scores(vectors, np.array([0.0, 1.0]), "hybrid", 0.5)
    assert used == "hybrid" and ctx == pytest.approx([0.0, 0.0, 1.0])
    assert hybrid == pytest.approx([0.25, 0.25, 0.5])
    single, *_ = agreement_scores(vectors[:1], None, "panel", 0.5)
    assert single == [None]   # no peers: unscored rather than invented


def test_weight_policy_scores_every_answer_keeps_all_and_instructs_the_judge():
    fleet = outlier_fleet()
    out = run(FusionLooper(fleet).run(request(), policy(policy="weight", reference="panel")))
    rows = scores_of(out)
    assert rows["coder"]["score"] < rows["qwen-72b"]["score"]
    assert rows["coder"]["score"] < rows["r1-distill"]["score"]
    assert not any(r["dropped"] for r in rows.values())
    grounding = out.trace["grounding"]
    assert (grounding["policy"], grounding["reference_used"], grounding["applied"]) == ("weight", "panel", True)
    assert "not truth" in grounding["measures"]
    synthesis = prompt_of(fleet.models["k2"].calls[1])
    assert "Give more weight to higher-scoring answers" in synthesis
    assert OUTLIER in synthesis and "grounding score:" in synthesis
    assert "grounding" in out.trace["timings_ms"]


def test_annotate_policy_keeps_all_without_weighting_instruction():
    fleet = outlier_fleet()
    run(FusionLooper(fleet).run(request(), policy(policy="annotate", reference="panel")))
    synthesis = prompt_of(fleet.models["k2"].calls[1])
    assert "grounding score:" in synthesis and OUTLIER in synthesis
    assert "Give more weight" not in synthesis


def test_filter_policy_drops_low_scores_from_the_judge_input():
    fleet = outlier_fleet()
    out = run(FusionLooper(fleet).run(request(), policy(policy="filter", reference="panel",
                                                         min_score=0.3)))
    rows = scores_of(out)
    assert rows["coder"]["dropped"] and not rows["qwen-72b"]["dropped"]
    assert OUTLIER not in prompt_of(fleet.models["k2"].calls[1])
    # The raw panel answer stays in the trace; only the judge input shrank.
    assert out.trace["responses"][2]["content"] == OUTLIER


def test_filter_policy_always_keeps_min_keep_best():
    fleet = outlier_fleet()
    out = run(FusionLooper(fleet).run(request(), policy(policy="filter", reference="panel",
                                                         min_score=1.0, min_keep=2)))
    kept = [m for m, r in scores_of(out).items() if not r["dropped"]]
    assert sorted(kept) == ["qwen-72b", "r1-distill"]


def test_context_reference_scores_against_system_and_tool_context():
    fleet = outlier_fleet()
    out = run(FusionLooper(fleet).run(request(system="Bananas grow in tropical climates on plants."),
                                      policy(reference="context")))
    rows = scores_of(out)
    assert out.trace["grounding"]["reference_used"] == "context"
    assert rows["coder"]["score"] > rows["qwen-72b"]["score"]
    assert rows["coder"]["context_agreement"] == rows["coder"]["score"]
    assert fleet.embedder.calls[0][-1] == "Bananas grow in tropical climates on plants."


def test_hybrid_blends_context_when_present_and_falls_back_to_panel_otherwise():
    out = run(FusionLooper(outlier_fleet()).run(request(), policy(reference="hybrid")))
    assert out.trace["grounding"]["reference_used"] == "panel"
    fleet = outlier_fleet()
    out = run(FusionLooper(fleet).run(request(system="Paris is the capital of France."),
                                      policy(reference="hybrid", context_weight=0.5)))
    assert out.trace["grounding"]["reference_used"] == "hybrid"
    row = scores_of(out)["qwen-72b"]
    assert row["score"] == pytest.approx((row["panel_agreement"] + row["context_agreement"]) / 2, abs=1e-3)


def test_embedder_failure_falls_back_to_plain_fusion_under_skip():
    fleet = outlier_fleet()
    fleet._embedder = FakeEmbedder(error=ModelUnavailable("bge-m3 down"))
    out = run(FusionLooper(fleet).run(request(), policy(policy="filter", min_score=1.0)))
    grounding = out.trace["grounding"]
    assert grounding["applied"] is False and "bge-m3 down" in grounding["error"]
    assert OUTLIER in prompt_of(fleet.models["k2"].calls[1])
    assert "grounding score" not in prompt_of(fleet.models["k2"].calls[1])


def test_embedder_failure_fails_the_request_under_fail():
    fleet = outlier_fleet()
    fleet._embedder = None
    with pytest.raises(ModelUnavailable):
        run(FusionLooper(fleet).run(request(), policy(on_error="fail")))
    assert fleet.models["k2"].calls == []


def test_grounding_disabled_calls_no_embedder_and_leaves_no_trace():
    fleet = outlier_fleet()
    params = FusionParams(model="k2")
    out = run(FusionLooper(fleet).run(request(), FusionPolicy.from_params("panel", params, PANEL)))
    assert fleet.embedder.calls == [] and "grounding" not in out.trace


def test_grounding_evidence_makes_the_body_trace_visible():
    params = FusionParams(model="k2", include_analysis=False, include_intermediate_responses=False,
                          grounding={"enabled": True})
    out = run(FusionLooper(outlier_fleet()).run(request(), FusionPolicy.from_params("panel", params, PANEL)))
    assert "grounding" in out.response["fusion"]
    assert "responses" not in out.response["fusion"] and "analysis" not in out.response["fusion"]


def test_quorum_is_checked_before_grounding_and_not_again_after_filter():
    fleet = outlier_fleet()
    params = FusionParams(model="k2", min_successful_responses=3,
                          grounding={"enabled": True, "policy": "filter", "min_score": 0.3,
                                     "reference": "panel"})
    out = run(FusionLooper(fleet).run(request(), FusionPolicy.from_params("panel", params, PANEL)))
    assert sum(not r["dropped"] for r in out.trace["grounding"]["responses"]) == 2
    assert out.response["choices"][0]["message"]["content"] == "the fused answer"
