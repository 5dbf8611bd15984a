"""The shipped intent templates and evaluation set are what the issue asks for."""

import json
from pathlib import Path

import pytest
import yaml

from serve_app.config.base import TASK_TYPES
from serve_app.routing.datafiles import RoutingDataError, load_templates


def test_templates_cover_the_seven_intents_with_at_least_200_sentences():
    templates = load_templates(["configs/intents"])
    counts = templates.count_by_intent()
    assert set(counts) == set(TASK_TYPES)
    assert len(templates.texts) >= 200 and min(counts.values()) >= 25


def test_eval_set_is_labelled_covers_images_and_is_not_a_copy_of_the_templates():
    items = [json.loads(line) for line in Path("configs/eval/routing_eval.jsonl").read_text().splitlines() if line]
    assert len(items) >= 200
    assert {i["label"] for i in items} == set(TASK_TYPES)
    with_images = [i for i in items if any(isinstance(m["content"], list) and
                                           any(p.get("type") == "image_url" for p in m["content"])
                                           for m in i["messages"])]
    assert len(with_images) >= 15
    templates = {t.lower() for t in load_templates(["configs/intents"]).texts}
    texts = [m["content"] for i in items for m in i["messages"] if isinstance(m["content"], str)]
    assert not [t for t in texts if t.strip().lower() in templates]


def _items(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


def _template_texts():
    """Every template sentence, stripped and lower-cased, for copy checks."""
    return {t.strip().lower() for t in load_templates(["configs/intents"]).texts}


def _texts(items):
    return [m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
            for i in items for m in i["messages"]]


def test_holdout_set_is_labelled_per_intent_and_not_copied_from_eval_or_templates():
    items = _items("configs/eval/routing_holdout.jsonl")
    counts = {t: sum(1 for i in items if i["label"] == t) for t in TASK_TYPES}
    assert len(items) >= 84 and min(counts.values()) >= 12, counts
    assert any(isinstance(m["content"], list) and any(p.get("type") == "image_url" for p in m["content"])
               for i in items for m in i["messages"])
    seen = {t.strip().lower() for t in _texts(_items("configs/eval/routing_eval.jsonl"))}
    seen |= _template_texts()
    assert not [t for t in _texts(items) if t.strip() and t.strip().lower() in seen]


@pytest.mark.parametrize("path,size", [("configs/eval/routing_test_blind.jsonl", 140),
                                       ("configs/eval/routing_test_blind2.jsonl", 140)])
def test_blind_test_sets_are_balanced_and_share_no_text_with_templates(path, size):
    """Written by someone who never saw the templates; a template copied from them would make
    the blind figure meaningless, so any copy fails here."""
    items = _items(path)
    counts = {t: sum(1 for i in items if i["label"] == t) for t in TASK_TYPES}
    assert len(items) == size and set(counts.values()) == {size // len(TASK_TYPES)}, counts
    templates = _template_texts()
    assert not [t for t in _texts(items) if t.strip().lower() in templates]


@pytest.mark.parametrize("path", ["configs/eval/safety_lookalikes.jsonl",
                                  "configs/eval/safety_lookalikes_blind.jsonl",
                                  "configs/eval/safety_lookalikes_blind2.jsonl"])
def test_safety_lookalikes_are_benign(path):
    items = _items(path)
    assert len(items) >= 7 and all(i["label"] in TASK_TYPES and i["label"] != "safety" for i in items)
    templates = _template_texts()
    assert not [t for t in _texts(items) if t.strip().lower() in templates]


def test_template_files_are_validated(tmp_path):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"intent": "poetry", "examples": ["a"]}))
    with pytest.raises(RoutingDataError, match="poetry"):
        load_templates([str(tmp_path)])
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"intent": "chat", "examples": [{"a": "b"}]}))
    with pytest.raises(RoutingDataError, match="non-empty strings"):
        load_templates([str(tmp_path)])
    with pytest.raises(RoutingDataError, match="not found"):
        load_templates([str(tmp_path / "missing")])
    (tmp_path / "bad.yaml").write_bytes(b"intent: chat\nexamples: ['\xff\xfe']\n")
    with pytest.raises(RoutingDataError, match="not UTF-8 text"):
        load_templates([str(tmp_path)])


def test_duplicate_templates_are_dropped(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"intent": "chat", "examples": ["Hi there", "hi there ", "Bye"]}))
    assert load_templates([str(tmp_path)]).texts == ("Hi there", "Bye")
