"""The trained intent head without the real model: settings, training data files, the artifact
and its staleness check, and the intent signal deciding by the head (bag-of-words embedder)."""

import argparse
import asyncio

import numpy as np
import pytest
import yaml

from serve_app.config.intent_head import _INTENTS
from serve_app.config.loader import ConfigError, parse_config
from serve_app.config.base import TASK_TYPES
from serve_app.routing import Router
from serve_app.routing.datafiles import RoutingDataError
from serve_app.routing.intent_head import IntentHead, StaleIntentHead, instruction_view, load_head
from serve_app.routing.training import load_training_set, train

from routing_fakes import ScriptedClassifier, chat, profile

TRAINING = {
    "pools": {"subject": ["python", "the weather", "my friend", "the article", "a photo"]},
    "compositions": [{"intent": "summary", "frames": ["summarize the article about {subject}",
                                                      "article about {subject}, summarize it"],
                      "per_frame": 3}],
}
EXTRA = {
    "code": ["python bug in the function", "code the function in python", "debug this python code"],
    "chat": ["hello my friend", "weather today friend", "hello again friend"],
    "reasoning": ["prove the integral", "equation to prove", "integral of the equation"],
    "vision": ["photo image describe", "the image in my photo", "photo of an image"],
    "safety": ["bomb weapon build", "weapon to hurt", "make a bomb weapon"],
    "unknown": ["thing stuff again", "the stuff and thing", "stuff thing thing"],
}


@pytest.fixture
def training_dir(tmp_path):
    directory = tmp_path / "training"
    directory.mkdir()
    (directory / "compositions.yaml").write_text(yaml.safe_dump(TRAINING))
    for intent, examples in EXTRA.items():
        (directory / f"{intent}.yaml").write_text(yaml.safe_dump({"intent": intent, "examples": examples}))
    return directory


def head_profile(template_dir, training_dir, artifact, **head):
    return profile(template_dir, signals={"intent": {"head": {
        "artifacts": {"sim/embed": str(artifact)}, **head,
        "training": {"training_files": [str(training_dir)], "holdout_fraction": 0.34, "folds": 3,
                     "memory_dims": 8, "threshold_floor": 0.2}}}})


@pytest.fixture
def trained(template_dir, training_dir, embedder, tmp_path):
    artifact = tmp_path / "head.npz"
    cfg = parse_config(head_profile(template_dir, training_dir, artifact))
    head, report = asyncio.run(train(cfg, embedder))
    head.save(artifact)
    return cfg, artifact, report


def test_settings_name_the_seven_intents():
    assert _INTENTS == TASK_TYPES


@pytest.mark.parametrize("head,path", [
    ({"artifacts": {}, "artifact": "y.npz"}, "routing.signals.intent.head.artifact"),
    ({"training": {"knn": 3}}, "routing.signals.intent.head.training.knn"),
    ({"min_confidence": {"poetry": 0.5}}, "routing.signals.intent.head.min_confidence"),
    ({"min_confidence": {"safety": 1.5}}, "routing.signals.intent.head.min_confidence"),
])
def test_head_settings_errors_name_their_key(head, path):
    with pytest.raises(ConfigError) as info:
        parse_config(profile(signals={"intent": {"head": head}}))
    assert path in info.value.paths


def test_training_set_expands_compositions_deterministically(template_dir, training_dir):
    first = load_training_set([str(template_dir)], [str(training_dir)])
    again = load_training_set([str(template_dir)], [str(training_dir)])
    assert first == again
    composed = [e for e in first if e.source == "composed"]
    assert len(composed) == 6 and all(e.intent == "summary" for e in composed)
    assert len({e.group for e in composed}) == 2  # one group per frame: never split across train/test
    assert {e.source for e in first} == {"template", "example", "composed"}
    assert "{" not in "".join(e.text for e in first)


@pytest.mark.parametrize("doc,message", [
    ({"intent": "summary", "compositions": [{"frames": ["about {nothing}"]}]}, "unknown pool 'nothing'"),
    ({"examples": ["a sentence"]}, "examples need the file's intent"),
    ({"intent": "chat", "examples": [{"Logic puzzle": "who owns the fish?"}]}, "quote it"),
    ({"intent": "chat", "exmaples": ["x"]}, "expected keys"),
])
def test_bad_training_files_fail_naming_the_problem(template_dir, tmp_path, doc, message):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(RoutingDataError, match=message):
        load_training_set([str(template_dir)], [str(tmp_path / "bad.yaml")])


def test_instruction_view_keeps_the_first_and_last_sentence():
    pasted = "The meeting moved to Thursday. Budget talks stalled again. " * 5
    assert instruction_view("Summarise this: " + pasted + "Thanks!") == "Summarise this: Thanks!"
    assert instruction_view("short request") == "short request"
    assert instruction_view("x" * 400, edge_chars=50) == "x" * 50


def test_instruction_view_drops_a_pasted_paragraph_or_quote():
    paragraph = "The Roman Republic was governed by two consuls elected every year, and a Senate advised them. " * 3
    # The instruction on its own line, the pasted paragraph on the next: the paragraph's last
    # sentence (its topic) is not part of the view.
    assert instruction_view("Rewrite this for a 10-year-old:\n\n" + paragraph) == "Rewrite this for a 10-year-old:"
    assert instruction_view(paragraph + "\n\ntl;dr please") == "tl;dr please"
    # A quoted text in one line: what is around the quote.
    quoted = 'Make this friendlier: "' + paragraph.strip() + '" it goes to a customer'
    assert instruction_view(quoted) == "Make this friendlier: … it goes to a customer"
    code = "Explain this:\n```\n" + "x = compute(y)\n" * 12 + "```\nwhy is it slow?"
    assert instruction_view(code) == "Explain this: … why is it slow?"
    # Two long lines and no quote: first and last sentence, as before.
    assert instruction_view(paragraph + "\n" + paragraph) == (
        "The Roman Republic was governed by two consuls elected every year, and a Senate advised them. "
        "The Roman Republic was governed by two consuls elected every year, and a Senate advised them.")


def test_artifact_round_trip_predicts_the_same(trained, embedder):
    cfg, artifact, report = trained
    head = IntentHead.read(artifact)
    assert head.intents == TASK_TYPES and set(head.thresholds) == set(TASK_TYPES)
    assert report.examples == len(load_training_set(cfg.routing.signals.intent.template_files,
                                                     cfg.routing.signals.intent.head.training.training_files))
    [vector] = np.asarray(asyncio.run(embedder.embed(["fix the python bug"])))
    assert head.predict(vector).best == "code"
    assert head.metadata["examples"] == report.examples and 0 <= head.metadata["holdout_accuracy"] <= 1


def test_a_changed_template_makes_the_artifact_stale(trained, template_dir):
    cfg, artifact, _ = trained
    paths = cfg.routing.signals.intent.template_files + cfg.routing.signals.intent.head.training.training_files
    load_head(str(artifact), paths, "sim/embed")  # fresh: loads
    (template_dir / "chat.yaml").write_text(yaml.safe_dump({"intent": "chat", "examples": ["hello there"]}))
    with pytest.raises(StaleIntentHead, match="stale.*horizon train-router --config"):
        load_head(str(artifact), paths, "sim/embed")
    with pytest.raises(StaleIntentHead, match="stale"):
        Router(cfg, None, None)  # the router refuses it at construction, not per request


def test_an_artifact_of_another_embedding_model_is_refused(trained):
    cfg, artifact, _ = trained
    paths = cfg.routing.signals.intent.template_files + cfg.routing.signals.intent.head.training.training_files
    with pytest.raises(StaleIntentHead, match="trained on 'sim/embed' embeddings.*BAAI/bge-m3"):
        load_head(str(artifact), paths, "BAAI/bge-m3")


def test_a_missing_artifact_names_the_build_command(template_dir, training_dir, tmp_path):
    cfg = parse_config(head_profile(template_dir, training_dir, tmp_path / "absent.npz"))
    with pytest.raises(RoutingDataError, match="not found; build it: `horizon train-router"):
        Router(cfg, None, None)


def test_without_an_artifact_for_its_embedding_model_the_profile_keeps_the_template_cosine(
        template_dir, training_dir, embedder, tmp_path):
    doc = head_profile(template_dir, training_dir, tmp_path / "absent.npz")
    doc["routing"]["signals"]["intent"]["head"]["artifacts"] = {"BAAI/bge-m3": "nowhere.npz"}
    router = Router(parse_config(doc), embedder, None)
    asyncio.run(router.start())
    result = asyncio.run(router.route(chat("please fix the bug in this python function")))
    assert router.intent_signal.head is None and router.intent_signal.index is not None
    assert next(m for m in result.signals if m.type == "intent").source == "embedding"


def test_the_router_decides_by_the_head_and_escalates_below_its_bar(trained, template_dir, training_dir,
                                                                     embedder):
    _, artifact, _ = trained
    router = Router(parse_config(head_profile(template_dir, training_dir, artifact)), embedder, None)
    asyncio.run(router.start())
    result = asyncio.run(router.route(chat("please fix the bug in this python function")))
    intent = next(m for m in result.signals if m.type == "intent")
    assert intent.source == "head" and result.decision.name == "code" and not result.escalated
    assert router.intent_signal.index is None  # no template matrix is built with a head
    strict = parse_config(head_profile(template_dir, training_dir, artifact, min_confidence={"code": 1.0}))
    classifier = ScriptedClassifier('{"task_type": "reasoning"}')
    escalated = asyncio.run(Router(strict, embedder, classifier).route(chat("please fix the bug in this python function")))
    assert escalated.escalated and escalated.task_type == "reasoning" and len(classifier.requests) == 1


def test_a_long_request_is_read_with_its_instruction_view(trained, template_dir, training_dir, embedder):
    _, artifact, _ = trained
    router = Router(parse_config(head_profile(template_dir, training_dir, artifact)), embedder, None)
    pasted = "The weather was fine. My friend said hello. The weather changed later. " * 4
    asyncio.run(router.route(chat("Summarize the article below. " + pasted + "Summarize it briefly.")))
    assert len(embedder.calls[-1]) == 2 and embedder.calls[-1][1] == "Summarize the article below. Summarize it briefly."


def test_train_router_check_says_whether_the_artifact_is_fresh(trained, tmp_path, capsys):
    from serve_app.routing import training

    cfg_doc = yaml.safe_load(open("configs/local.yaml"))
    assert training.run(argparse.Namespace(config="configs/local.yaml", check=True, output=None)) == 0
    assert "up to date" in capsys.readouterr().out
    head = cfg_doc["applications"][0]["args"]["routing"]["signals"]["intent"]["head"]
    head["training"] = {"training_files": [str(tmp_path)]}  # other data: the artifact is stale for it
    (tmp_path / "x.yaml").write_text(yaml.safe_dump({"intent": "chat", "examples": ["hi"]}))
    other = tmp_path / "profile.yaml"
    other.write_text(yaml.safe_dump(cfg_doc))
    assert training.run(argparse.Namespace(config=str(other), check=True, output=None)) == 1
    assert "stale" in capsys.readouterr().err


def test_train_router_is_a_horizon_command():
    from serve_app.cli import _COMMANDS

    assert ("train-router", "serve_app.routing.training") in [(n, m) for n, m, _ in _COMMANDS]


def test_start_with_a_head_waits_for_the_embedding_model(trained, template_dir, training_dir):
    """The ingress installs the router once start() returns: with a head it must still fail
    while the embedding deployment is down (one probe text), as the template start did."""
    from routing_fakes import VOCABULARY, BagOfWordsEmbedder

    _, artifact, _ = trained
    cfg = parse_config(head_profile(template_dir, training_dir, artifact))
    with pytest.raises(RuntimeError, match="embedding deployment down"):
        asyncio.run(Router(cfg, BagOfWordsEmbedder(VOCABULARY, fail=True), None).start())
    up = BagOfWordsEmbedder(VOCABULARY)
    router = Router(cfg, up, None)
    asyncio.run(router.start())
    asyncio.run(router.start())
    assert up.texts_embedded == 1
