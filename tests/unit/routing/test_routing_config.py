"""routing.signals is typed: mistakes fail at load with the path of the bad key."""

import pytest

from serve_app.config.loader import ConfigError, load_config, parse_config

from routing_fakes import DEFAULT_DECISIONS, intent_decision, profile


def error_paths(doc):
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    return info.value.paths


def test_sim_profile_loads_with_the_full_decision_set():
    cfg = load_config("configs/sim.yaml")
    names = {d.name for d in cfg.routing.decisions}
    assert {"safety_refusal", "vision", "complex_reasoning", "code", "reasoning", "summary",
            "general_chat", "unclassified"} <= names
    assert cfg.decision("safety_refusal").refusal and cfg.decision("complex_reasoning").model_refs[0].model == "k2"
    assert cfg.routing.signals.intent.threshold_for("BAAI/bge-m3") == 0.78
    assert cfg.routing.signals.intent.threshold_for(cfg.embedding_model.engine.model) < 0.78


def test_unknown_signal_key_is_an_error():
    doc = profile(signals={"intent": {"treshold": 0.5}})
    assert "routing.signals.intent.treshold" in error_paths(doc)


def test_condition_with_unknown_signal_type():
    bad = intent_decision("x", "code", "coder")
    bad["rules"]["conditions"][0]["type"] = "vibes"
    paths = error_paths(profile(decisions=DEFAULT_DECISIONS + [bad]))
    assert any(p.startswith(f"routing.decisions[{len(DEFAULT_DECISIONS)}].rules") for p in paths)


def test_condition_naming_a_missing_keyword_list_or_intent():
    bad = {"name": "kw", "modelRefs": [{"model": "qwen-72b"}],
           "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "nope"}]}}
    assert f"routing.decisions[{len(DEFAULT_DECISIONS)}].rules" in error_paths(profile(decisions=DEFAULT_DECISIONS + [bad]))
    wrong_intent = intent_decision("x", "code", "coder")
    wrong_intent["rules"]["conditions"][0]["name"] = "poetry"
    assert f"routing.decisions[{len(DEFAULT_DECISIONS)}].rules" in error_paths(profile(decisions=DEFAULT_DECISIONS + [wrong_intent]))


def test_bad_regex_names_its_path():
    doc = profile(signals={"keywords": {"k": {"regex": ["ok", "(unclosed"]}}})
    assert "routing.signals.keywords.k.regex[1]" in error_paths(doc)


@pytest.mark.parametrize("rule, where", [
    ({"keywords": ["fusion", " "]}, "keywords[1]"),     # matches any request ending in "?"
    ({"regex": ["panel", "x?"]}, "regex[1]"),          # matches the empty string: every request
    ({"regex": ["^"]}, "regex[0]"),
])
def test_a_keyword_or_regex_that_matches_every_request_names_its_path(rule, where):
    assert f"routing.signals.keywords.k.{where}" in error_paths(profile(signals={"keywords": {"k": rule}}))


def test_an_empty_refusal_is_refused_not_read_as_no_refusal():
    # Read as falsy at request time, refusal: "" sent what the decision should refuse to its model.
    refusing = {"name": "nope", "modelRefs": [{"model": "qwen-72b"}], "refusal": "  "}
    assert f"routing.decisions[{len(DEFAULT_DECISIONS)}].refusal" in \
        error_paths(profile(decisions=DEFAULT_DECISIONS + [refusing]))


def test_classifier_model_must_exist():
    doc = profile(signals={"intent": {"classifier": {"model": "gpt-9"}}})
    assert "routing.signals.intent.classifier.model" in error_paths(doc)
    # An embedding model cannot answer the classifier's chat question.
    with pytest.raises(ConfigError, match="'embed' is an embedding model"):
        parse_config(profile(signals={"intent": {"classifier": {"model": "embed"}}}))


def test_threshold_outside_cosine_range():
    doc = profile(signals={"intent": {"thresholds": {"sim/embed": 1.5}}})
    assert "routing.signals.intent.thresholds.sim/embed" in error_paths(doc)


def test_sampling_class_must_be_in_the_matrix():
    bad = intent_decision("c", "chat", "qwen-72b", sampling_class="spicy")
    assert f"routing.decisions[{len(DEFAULT_DECISIONS)}].sampling_class" in error_paths(profile(decisions=DEFAULT_DECISIONS + [bad]))


def test_context_buckets_must_be_ordered():
    doc = profile(signals={"context_length": {"buckets": [{"name": "a", "min_tokens": 10, "max_tokens": 5}]}})
    assert "routing.signals.context_length.buckets[0].max_tokens" in error_paths(doc)


def test_every_signal_type_has_settings_condition_names_and_a_builder():
    from serve_app.config.base import SIGNAL_TYPES
    from serve_app.config.routing import SIGNAL_FIELDS, SignalSettings
    from serve_app.routing.signals import BUILDERS

    assert set(BUILDERS) == set(SIGNAL_TYPES) == set(SIGNAL_FIELDS)
    settings = SignalSettings()
    for signal_type in SIGNAL_TYPES:
        names = settings.condition_names(signal_type)
        assert names is None or isinstance(names, set)


def _with(doc, change):
    change(doc)
    return doc


@pytest.mark.parametrize("change, path", [
    # An embedding model cannot answer chat: as a decision's model or a fallback hop.
    (lambda d: d["routing"]["decisions"][0]["modelRefs"].__setitem__(0, {"model": "embed"}),
     "routing.decisions[0].modelRefs[0].model"),
    (lambda d: d.setdefault("resilience", {}).update(fallback_chains={"chat": ["qwen-72b", "embed"]}),
     "resilience.fallback_chains.chat[1]"),
    # Inputs up to max_length pass the endpoint's check; past the model's positions they would
    # fail inside the model instead of the 400.
    (lambda d: d["models"][5].update(engine={"model": "sim/embed", "max_model_len": 512},
                                     embedding={"max_length": 1024}), "models[5].embedding.max_length"),
    (lambda d: d.update({"global": {"server": {"min_replicas": 3, "max_replicas": 2}}}), "global.server"),
    (lambda d: d.update(sessions={"redis_url": "http://127.0.0.1:6379"}), "sessions.redis_url"),
])
def test_settings_that_could_only_fail_at_request_time_fail_at_load(change, path):
    assert error_paths(_with(profile(), change)) == [path]
