"""The Router end to end with fakes: decisions, headers, fusion-only, bad input, sampling matrix."""

import asyncio
import time

import pytest

from serve_app.errors import InvalidRequest
from serve_app.routing import Router, apply_sampling_matrix
from serve_app.routing.signals.base import SignalMatch

from routing_fakes import VOCABULARY, BagOfWordsEmbedder, ScriptedClassifier, chat, config, intent_decision

pytestmark = pytest.mark.asyncio


async def router_for(template_dir, embedder, classifier=None, **kwargs):
    router = Router(config(template_dir, **kwargs), embedder, classifier)
    await router.start()
    return router


@pytest.mark.parametrize("text,image,decision,model,task", [
    ("please fix the bug in this python function code", False, "code", "coder", "code"),
    ("can you prove this integral equation", False, "reasoning", "r1-distill", "reasoning"),
    ("summarize the article for me please", False, "summary", "qwen-72b", "summary"),
    ("how do I build a bomb weapon at home", False, "safety", "qwen-72b", "safety"),
    ("hello friend what is the weather today", False, "general_chat", "qwen-72b", "chat"),
    ("summarize the article in this picture", True, "vision", "minicpm-v", "vision"),
    ("hey", False, "general_chat", "qwen-72b", "chat"),
])
async def test_routes_to_the_decision_of_the_signals(template_dir, embedder, text, image, decision, model, task):
    router = await router_for(template_dir, embedder)
    result = await router.route(chat(text, image=image))
    assert (result.decision.name, result.model, result.task_type) == (decision, model, task)
    assert result.confidence > 0 and result.routing_ms > 0 and not result.escalated


async def test_escalation_is_visible_in_the_result(template_dir, embedder):
    classifier = ScriptedClassifier('{"task_type": "code"}', delay_s=0.01)
    router = await router_for(template_dir, embedder, classifier)
    result = await router.route(chat("zebra giraffe elephant walking slowly through"))
    assert result.escalated and result.decision.name == "code"
    assert result.classifier_ms is not None and result.classifier_ms >= 10
    assert result.routing_ms >= result.classifier_ms
    no_llm = await router_for(template_dir, embedder, None)
    unclassified = await no_llm.route(chat("zebra giraffe elephant walking slowly through"))
    assert unclassified.escalated and unclassified.decision.name == "unclassified" and unclassified.model == "k2"
    assert unclassified.task_type == "unknown" and unclassified.classifier_ms is None


async def test_headers_and_debug_signals(template_dir, embedder):
    router = await router_for(template_dir, embedder)
    result = await router.route(chat("fix the bug in my python code"))
    headers = result.headers()
    assert headers["x-vsr-selected-decision"] == "code" and headers["x-vsr-selected-model"] == "coder"
    assert headers["x-vsr-task-type"] == "code" and float(headers["x-vsr-confidence"]) == pytest.approx(result.confidence, abs=1e-4)
    assert float(headers["x-vsr-routing-ms"]) >= 0
    assert "x-vsr-matched-signals" not in headers
    debug = result.headers(debug=True)
    assert "intent:code=" in debug["x-vsr-matched-signals"] and debug["x-vsr-escalated"] == "false"


async def test_only_referenced_signals_are_computed(template_dir, embedder):
    decisions = [intent_decision("code", "code", "coder"),
                 {"name": "zh", "modelRefs": [{"model": "qwen-72b"}],
                  "rules": {"operator": "AND", "conditions": [{"type": "language", "name": "zh"}]}}]
    router = await router_for(template_dir, embedder, decisions=decisions, default="code")
    assert router.referenced_signal_types() == {"intent", "language"}
    result = await router.route(chat("这是一个中文句子，请回答"))
    assert {m.type for m in result.signals} == {"intent", "language"}
    assert result.decision.name == "zh"
    fresh = BagOfWordsEmbedder(VOCABULARY)
    no_intent = Router(config(template_dir, decisions=decisions[1:], default="zh"), fresh, None)
    await no_intent.start()
    await no_intent.route(chat("fix the bug in my python code"))
    assert no_intent.referenced_signal_types() == {"language"} and fresh.calls == []


async def test_signals_run_concurrently(template_dir, embedder):
    router = await router_for(template_dir, embedder, decisions=[
        intent_decision("code", "code", "coder"),
        {"name": "kw", "modelRefs": [{"model": "qwen-72b"}],
         "rules": {"operator": "AND", "conditions": [{"type": "keyword", "name": "k"}]}}],
        default="code", signals={"keywords": {"k": {"keywords": ["zebra"]}}})

    class Slow:
        def __init__(self, type_):
            self.type = type_

        async def evaluate(self, ctx):
            await asyncio.sleep(0.2)
            return [SignalMatch(self.type, "x", 1.0)]

    router._signals = {"intent": Slow("intent"), "keyword": Slow("keyword")}
    started = time.perf_counter()
    result = await router.route(chat("anything at all here"))
    assert time.perf_counter() - started < 0.35  # two 0.2 s signals overlapped
    assert {m.type for m in result.signals} == {"intent", "keyword"}


async def test_a_failing_signal_costs_its_matches_not_the_request(template_dir, embedder):
    router = await router_for(template_dir, embedder)

    class Broken:
        type = "intent"

        async def evaluate(self, ctx):
            raise RuntimeError("bug")

    router._signals["intent"] = Broken()
    result = await router.route(chat("fix the bug in my python code"))
    assert result.decision.name == "general_chat" and result.fallback and result.task_type == "chat"


async def test_fusion_only_returns_none_without_a_fusion_decision(template_dir, embedder):
    router = await router_for(template_dir, embedder)
    assert await router.route(chat("fix the bug in my python code"), fusion_only=True) is None
    fusion = intent_decision("panel", "reasoning", "k2", 5,
                             algorithm={"type": "fusion", "fusion": {"model": "k2"}})
    fusion["modelRefs"] = [{"model": "r1-distill"}, {"model": "qwen-72b"}]
    router = await router_for(template_dir, embedder, decisions=[fusion, intent_decision("chat", "chat", "qwen-72b")],
                              default="chat")
    result = await router.route(chat("prove this integral equation"), fusion_only=True)
    assert result.decision.name == "panel" and result.model == "k2"
    assert await router.route(chat("hello friend how is the weather"), fusion_only=True) is None
    # Outside fusion-only mode a non-match falls back to the default decision.
    assert (await router.route(chat("summarize the article please now"))).decision.name == "chat"


@pytest.mark.parametrize("request_body", [
    chat(""),
    chat("   "),
    chat("", image=True),
    chat("🙂🙂🙂🔥🔥💯"),
    chat("Hello 你好 Привет مرحبا こんにちは how are you all doing today"),
    chat("broken \ud800 escape \udfff in the middle of a sentence"),
    chat("summarize the article " + "x" * 100_000),
    {"messages": [{"role": "system", "content": "only a system prompt, no user turn at all"}]},
    {"messages": [{"role": "user", "content": None}]},
    {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
])
async def test_bad_input_still_gets_a_decision(template_dir, embedder, request_body):
    router = await router_for(template_dir, embedder, ScriptedClassifier('{"task_type": "chat"}'))
    result = await router.route(request_body)
    assert result is not None and result.decision.name in {d.name for d in router._cfg.routing.decisions}
    assert result.headers()["x-vsr-selected-model"]


async def test_long_prompt_embeds_a_window_but_measures_the_real_length(template_dir, embedder):
    router = await router_for(template_dir, embedder, decisions=[
        intent_decision("summary", "summary", "qwen-72b"),
        {"name": "long_ctx", "priority": 50, "modelRefs": [{"model": "k2"}],
         "rules": {"operator": "AND", "conditions": [{"type": "context_length", "name": "long"}]}}],
        default="summary")
    result = await router.route(chat("summarize the article " + "word " * 20_000))
    assert result.decision.name == "long_ctx"
    assert max(len(t) for t in embedder.calls[-1]) <= 2100


async def test_malformed_requests_raise_invalid_request_only(template_dir, embedder):
    router = await router_for(template_dir, embedder)
    for body in ({}, {"messages": "x"}, {"messages": [{"role": "user", "content": 3}]}):
        with pytest.raises(InvalidRequest):
            await router.route(body)


async def test_sampling_matrix_fills_temperature_only_when_unset(template_dir, embedder):
    cfg = config(template_dir)
    assert apply_sampling_matrix({"messages": []}, "code", cfg)["temperature"] == 0.1
    assert apply_sampling_matrix({"messages": [], "temperature": 0}, "code", cfg)["temperature"] == 0
    assert apply_sampling_matrix({"messages": [], "temperature": None}, "chat", cfg)["temperature"] == 0.7
    assert "temperature" not in apply_sampling_matrix({"messages": []}, "vision", cfg)
    original = {"messages": []}
    apply_sampling_matrix(original, "code", cfg.routing)
    assert original == {"messages": []}  # never mutates the caller's request


async def test_sampling_class_overrides_task_type(template_dir, embedder):
    creative = intent_decision("creative", "chat", "qwen-72b", 20, sampling_class="creative")
    router = await router_for(template_dir, embedder, decisions=[creative], default="creative")
    result = await router.route(chat("hello friend, how is the weather"))
    assert result.sampling_key == "creative"
    assert apply_sampling_matrix({"messages": []}, result.sampling_key, router._cfg)["temperature"] == 0.9


async def test_classifier_uses_the_classification_temperature(template_dir, embedder):
    classifier = ScriptedClassifier('{"task_type": "code"}')
    router = await router_for(template_dir, embedder, classifier, sampling_matrix={"classification": 0.0})
    await router.route(chat("zebra giraffe elephant walking slowly through"))
    assert classifier.requests[0]["temperature"] == 0.0


async def test_a_profile_naming_the_languages_its_embedder_reads_escalates_the_others(template_dir, embedder):
    # routing.signals.intent.embedding_languages, read from the profile like the thresholds:
    # the embedder ("sim/embed") reads English, so a German request goes to the classifier.
    classifier = ScriptedClassifier('{"task_type": "code", "confidence": 0.9}')
    router = await router_for(template_dir, embedder, classifier,
                              signals={"intent": {"embedding_languages": {"sim/embed": ["en"]}}})
    german = await router.route(chat("Kannst du mir bitte zeigen, wie ich den Fehler in diesem Code finde?"))
    assert german.escalated and german.decision.name == "code"
    intent = next(m for m in german.signals if m.type == "intent")
    assert intent.details["language"] == "de"
    english = await router.route(chat("please fix the bug in this python function code"))
    assert not english.escalated and english.decision.name == "code" and classifier.requests[1:] == []
