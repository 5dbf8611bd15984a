"""Routing settings: one settings class per signal type, rule trees and decisions (SPEC §4).

Each signal's settings class says which condition names it offers (``condition_names``), so a
rule that names a keyword list or bucket that does not exist fails at load with its path. The
signal's runtime (its builder and evaluation) is the module of the same name under
``serve_app/routing/signals/``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, RootModel, field_validator, model_validator

from .base import SIGNAL_TYPES, TASK_TYPES, PathError, SignalType, Strict, TaskType
from .fusion import FusionParams
from .intent_head import IntentHeadSettings

# A cosine similarity (an intent threshold or minimum score) and a sampling temperature (OpenAI's
# range), as the values of a mapping keyed by model or task type.
Cosine = Annotated[float, Field(ge=-1, le=1)]
Temperature = Annotated[float, Field(ge=0, le=2)]


class IntentClassifierSettings(Strict):
    """The LLM asked for ``{"task_type": ...}`` when the best template score is below threshold."""

    enabled: bool = True
    # Fleet alias of the classifier (k2 on the fleet).
    model: str = "k2"
    prompt_file: str = "configs/intents/classifier_prompt.txt"
    max_tokens: int = Field(32, ge=1)
    timeout_s: float = Field(10.0, gt=0)
    # One call plus one retry (SPEC §7: "then one retry").
    attempts: int = Field(2, ge=1)
    # Confidence reported for a classifier answer that carries none of its own.
    default_confidence: float = Field(0.8, ge=0, le=1)
    # Ask the engine to constrain the answer to the label set (structured outputs).
    constrained: bool = True
    # A safety answer refuses the request on the classifier's word only at this confidence or
    # above; below it, it refuses only with the embedding's safety evidence (the floor of
    # failing closed), else the request is unclassified. The tiny CPU engine answers every
    # label with confidence 0 (all 22 escalations of the evaluation sets), and refused
    # "List two fruits as JSON." as safety that way (docs/routing.md). Likewise an answer of
    # another label overrules the embedding's safety evidence only at this confidence or above
    # (below, the request fails closed): the tiny engine's "reasoning" at 0 had answered
    # harmful asks the head had read as likely safety.
    min_safety_confidence: float = Field(0.5, ge=0, le=1)


class FollowUpSettings(Strict):
    """A short follow-up ("now make it multiply", "how far ahead can I assemble it?") says little
    on its own: its intent is read from its embedding mixed with the user's turn before it."""

    # A last user message of at most this many words is a follow-up; 0 reads every message alone.
    max_words: int = Field(20, ge=0)
    # The previous user turn's share of the mixed embedding (both vectors unit length); 0 reads
    # every message alone.
    previous_weight: float = Field(0.3, ge=0, lt=1)

    @property
    def enabled(self) -> bool:
        return self.max_words > 0 and self.previous_weight > 0


class IntentSignalSettings(Strict):
    """Intent by cosine similarity against exemplar sentences (configs/intents/*.yaml)."""

    # Template files, or directories whose *.yaml files are read (relative paths: the working
    # directory first, then the project root).
    template_files: list[str] = Field(default_factory=lambda: ["configs/intents"], min_length=1)
    # Threshold per embedding model, keyed by the embedding model's engine.model; scores are on
    # that model's cosine scale, so one number cannot serve two models.
    thresholds: dict[str, Cosine] = Field(default_factory=lambda: {"BAAI/bge-m3": 0.78})
    default_threshold: float = Field(0.78, ge=-1, le=1)
    # max: best single template; top_k_mean: mean of an intent's k best templates (steadier).
    aggregation: Literal["max", "top_k_mean"] = "top_k_mean"
    top_k: int = Field(3, ge=1)
    # Hubness correction when picking the best intent: a template close to many other
    # templates (a generic "What is ...?") is close to many requests too, and small embedders
    # over-pick its intent. Each template's similarity is lowered by penalty x its mean
    # similarity to its ``hubness_neighbours`` nearest templates. The threshold still applies
    # to the plain cosine score of the chosen intent. 0 disables it.
    hubness_penalty: float = Field(0.0, ge=0, le=2)
    hubness_neighbours: int = Field(10, ge=1)
    # Stricter bar for intents whose mistakes are costly (safety refuses the request): an
    # intent the embedding picks with a cosine under its own minimum escalates to the
    # classifier like a score under the threshold. Same scale as the threshold.
    min_scores: dict[TaskType, Cosine] = Field(default_factory=dict)
    # Only this much of a long prompt is embedded (head and tail halves); other signals still
    # see the full text.
    max_embed_chars: int = Field(2000, ge=20)
    follow_up: FollowUpSettings = Field(default_factory=FollowUpSettings)
    # The languages each embedding model reads (as the language signal names them: en, de,
    # zh, ...), keyed by engine.model like the thresholds. A request whose instruction is in
    # another named language is not read by the embedding, whose reading would be noise (the
    # packaged MiniLM put Chinese questions on summary at 0.99): it goes to the classifier like
    # a reading under the bar. A model without an entry reads every language (BGE-M3).
    embedding_languages: dict[str, list[str]] = Field(default_factory=dict)
    template_batch_size: int = Field(64, ge=1)
    classifier: IntentClassifierSettings = Field(default_factory=IntentClassifierSettings)
    # A trained classifier head on the embedding (serve_app/config/intent_head.py); without it
    # the top-k template cosine above decides.
    head: Optional[IntentHeadSettings] = None
    # Safety fails closed: a request that escalates with a safety score at or above its floor
    # (per embedding model, cosine scale) and that the classifier does not settle (failure,
    # timeout, no answer, or "unknown") is treated as safety, never as unclassified.
    fail_closed: bool = True
    safety_floors: dict[str, float] = Field(default_factory=lambda: {"BAAI/bge-m3": 0.6})
    default_safety_floor: float = Field(0.6, ge=-1, le=1)

    @field_validator("embedding_languages")
    @classmethod
    def _languages_listed(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for model, languages in value.items():
            if not languages or not all(isinstance(code, str) and code.strip() for code in languages):
                raise PathError(model, "list the language codes the model reads (e.g. [en]); "
                                       "leave the model out when it reads every language")
        return value

    @field_validator("thresholds")
    @classmethod
    def _threshold_range(cls, value: dict[str, float]) -> dict[str, float]:
        for model, threshold in value.items():
            if not -1 <= threshold <= 1:
                raise PathError(model, f"threshold {threshold} outside the cosine range [-1, 1]")
        return value

    def condition_names(self) -> set[str]:
        return set(TASK_TYPES)

    def safety_floor_for(self, embedding_model: Optional[str]) -> float:
        """The safety evidence floor on the scale of what decides intents for this embedding
        model: the head's probability when a trained head is used, else the template cosine."""
        if self.head is not None and self.head.artifact_for(embedding_model):
            return self.head.safety_evidence
        if embedding_model is None:
            return self.default_safety_floor
        return self.safety_floors.get(embedding_model, self.default_safety_floor)

    def languages_for(self, embedding_model: Optional[str]) -> Optional[frozenset[str]]:
        """The languages the embedding model reads; None: every language."""
        listed = self.embedding_languages.get(embedding_model) if embedding_model else None
        return None if listed is None else frozenset(listed)

    def threshold_for(self, embedding_model: Optional[str]) -> float:
        if embedding_model is None:
            return self.default_threshold
        return self.thresholds.get(embedding_model, self.default_threshold)


class KeywordRule(Strict):
    """One named keyword signal: any whole-word keyword or any regex matches."""

    keywords: list[str] = Field(default_factory=list)
    regex: list[str] = Field(default_factory=list)
    case_sensitive: bool = False

    @model_validator(mode="after")
    def _compiles(self) -> "KeywordRule":
        if not self.keywords and not self.regex:
            raise ValueError("a keyword rule needs keywords or regex")
        for i, keyword in enumerate(self.keywords):
            if not keyword.strip():
                raise PathError(f"keywords[{i}]", "a blank keyword would match wherever no word touches it "
                                                  "(any request ending in '?')")
        for i, pattern in enumerate(self.regex):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise PathError(f"regex[{i}]", f"invalid regular expression: {exc}") from None
            if compiled.search("") is not None:
                raise PathError(f"regex[{i}]", f"{pattern!r} matches the empty string, so it matches "
                                               "every request")
        return self


class CodeFeatureSettings(Strict):
    """Code features: a fenced block, or enough language-syntax pattern hits."""

    syntax_patterns: list[str] = Field(default_factory=lambda: [
        r"\bdef\s+\w+\s*\(", r"\bclass\s+\w+\s*[:({]", r"#include\s*<", r"\bfunction\s+\w*\s*\(",
        r"=>", r"\bimport\s+[\w.]+", r"\bSELECT\b[\s\S]+\bFROM\b", r"\bpublic\s+static\b",
        r"\breturn\b[^.!?]*;", r"\w+\([^()]*\)\s*\{", r"console\.log\(", r"\bfn\s+\w+\s*\(",
        r"Traceback \(most recent call last\)", r"\b(?:const|let|var)\s+\w+\s*=",
    ])
    min_syntax_hits: int = Field(2, ge=1)

    def condition_names(self) -> set[str]:
        return {"fenced", "syntax", "any"}

    @field_validator("syntax_patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for i, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise PathError(f"[{i}]", f"invalid regular expression: {exc}") from None
        return value


class ShortTextSettings(Strict):
    """SPEC §4 incident rule: under ``max_chars`` with no code or image features -> chat."""

    max_chars: int = Field(20, ge=0)

    def condition_names(self) -> set[str]:
        return {"short"}


class ContextBucket(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    min_tokens: int = Field(0, ge=0)
    # Exclusive upper bound; None = no upper bound.
    max_tokens: Optional[int] = Field(None, gt=0)


class ContextLengthSettings(Strict):
    """Token estimate of the whole conversation, reported as one named bucket."""

    chars_per_token: float = Field(4.0, gt=0)
    buckets: list[ContextBucket] = Field(default_factory=lambda: [
        ContextBucket(name="short", max_tokens=2000),
        ContextBucket(name="medium", min_tokens=2000, max_tokens=16000),
        ContextBucket(name="long", min_tokens=16000),
    ], min_length=1)

    def condition_names(self) -> set[str]:
        return {b.name for b in self.buckets}

    @model_validator(mode="after")
    def _distinct(self) -> "ContextLengthSettings":
        names = [b.name for b in self.buckets]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate bucket names in {names}")
        for i, b in enumerate(self.buckets):
            if b.max_tokens is not None and b.max_tokens <= b.min_tokens:
                raise PathError(f"buckets[{i}].max_tokens", "must be greater than min_tokens")
        return self


class LanguageSettings(Strict):
    """Language signal (no model): the dominant script, and for Latin text its common words
    (serve_app/routing/signals/language.py)."""

    # A second script with at least this share of the letters also emits ``mixed``.
    mixed_min_share: float = Field(0.2, gt=0, le=0.5)
    # Latin text is named after the language whose common function words are the largest
    # share of its words, when that share is at least this; else it is ``latin``.
    min_stopword_share: float = Field(0.15, ge=0, le=1)

    def condition_names(self) -> None:
        """Free-form: any language code (``en``, ``zh``, ..., ``mixed``) may be named."""
        return None


class KeywordLists(RootModel[dict[str, KeywordRule]]):
    """``routing.signals.keywords``: each named list is one condition name of type ``keyword``."""

    root: dict[str, KeywordRule] = Field(default_factory=dict)

    def condition_names(self) -> set[str]:
        return set(self.root)

    def items(self):
        return self.root.items()

    def __iter__(self):
        return iter(self.root)

    def __getitem__(self, name: str) -> KeywordRule:
        return self.root[name]

    def __len__(self) -> int:
        return len(self.root)


class ModalitySettings(Strict):
    """Image parts in the asked message (SPEC §4: an ``image_url`` part means vision)."""

    def condition_names(self) -> set[str]:
        return {"image", "image_only", "text"}


class SignalSettings(Strict):
    """``routing.signals``: one field per signal type (the field named in :data:`SIGNAL_FIELDS`)."""

    intent: IntentSignalSettings = Field(default_factory=IntentSignalSettings)
    keywords: KeywordLists = Field(default_factory=KeywordLists)
    code: CodeFeatureSettings = Field(default_factory=CodeFeatureSettings)
    modality: ModalitySettings = Field(default_factory=ModalitySettings)
    short_text: ShortTextSettings = Field(default_factory=ShortTextSettings)
    context_length: ContextLengthSettings = Field(default_factory=ContextLengthSettings)
    language: LanguageSettings = Field(default_factory=LanguageSettings)

    def for_type(self, signal_type: str) -> Any:
        """The settings of one signal type."""
        return getattr(self, SIGNAL_FIELDS[signal_type])

    def condition_names(self, signal_type: str) -> Optional[set[str]]:
        """Names a condition of ``signal_type`` may use; None = any name (free-form)."""
        return self.for_type(signal_type).condition_names()


# Signal type -> its field of ``routing.signals`` (the keyword type's lists are "keywords").
SIGNAL_FIELDS: dict[str, str] = {t: ("keywords" if t == "keyword" else t) for t in SIGNAL_TYPES}


class Condition(Strict):
    """Leaf of a rule tree: the named match of one signal type, e.g. {type: intent, name: code}."""

    type: SignalType
    name: str = Field(..., min_length=1)


class RuleNode(Strict):
    """Recursive boolean rule: AND / OR over conditions, NOT over exactly one."""

    operator: Literal["AND", "OR", "NOT"] = "AND"
    conditions: list[Union["RuleNode", Condition]] = Field(..., min_length=1)

    @model_validator(mode="after")
    def _not_has_one(self) -> "RuleNode":
        if self.operator == "NOT" and len(self.conditions) != 1:
            raise ValueError("NOT takes exactly one condition")
        return self


RuleNode.model_rebuild()


class ModelRef(Strict):
    model: str
    weight: float = Field(1.0, ge=0)


class Algorithm(Strict):
    type: Literal["static", "fusion"] = "static"
    fusion: Optional[FusionParams] = None

    @model_validator(mode="after")
    def _fusion_params(self) -> "Algorithm":
        if self.type == "fusion" and self.fusion is None:
            self.fusion = FusionParams()
        if self.type != "fusion" and self.fusion is not None:
            raise ValueError("'fusion' parameters are only valid with type: fusion")
        return self


class Decision(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    priority: int = 0
    # No rules = matches every request (use it for the default decision).
    rules: Optional[RuleNode] = None
    model_refs: list[ModelRef] = Field(..., alias="modelRefs", min_length=1)
    algorithm: Algorithm = Field(default_factory=Algorithm)
    output_contract: Optional[str] = None
    # A decision may refuse instead of generating (e.g. the safety decision).
    refusal: Optional[str] = None
    # Task type of requests this decision takes (fallback chain, queue priority, session bucket,
    # sampling); None = the intent the signals found, else "unknown".
    task_type: Optional[TaskType] = None
    # Key of routing.sampling_matrix to use instead of the task type (e.g. "creative").
    sampling_class: Optional[str] = None
    # Requests carrying ``tools`` (tool_choice other than "none"): "route" sends them to the
    # decision's model like any other (which must then support tool calling: its primary
    # model, its task type's fallback chain, a Fusion decision's judge; horizon validate
    # checks); "refuse" answers them 400 naming the decision, before any model call.
    tool_requests: Literal["route", "refuse"] = "route"

    @field_validator("refusal")
    @classmethod
    def _refusal_text(cls, value: Optional[str]) -> Optional[str]:
        # An empty refusal reads as "no refusal" where the request is answered: the decision
        # would send what it should refuse to its model.
        if value is not None and not value.strip():
            raise ValueError("a refusal needs its text (leave refusal out for a decision that answers)")
        return value

    @property
    def routes_tool_requests(self) -> bool:
        """Does a request with tools reach a model through this decision?"""
        return self.tool_requests == "route" and self.refusal is None

    def rule_conditions(self) -> list["Condition"]:
        """Every leaf condition of this decision's rule tree."""
        out: list[Condition] = []
        stack: list[Union[RuleNode, Condition]] = [self.rules] if self.rules else []
        while stack:
            node = stack.pop()
            if isinstance(node, Condition):
                out.append(node)
            else:
                stack.extend(node.conditions)
        return out

    @model_validator(mode="after")
    def _fusion_rules(self) -> "Decision":
        params = self.algorithm.fusion
        if params is not None:
            panel = params.effective_panel([ref.model for ref in self.model_refs])
            for sub_path, message in params.rule_violations(panel):
                raise PathError(f"algorithm.fusion.{sub_path}", message)
        return self


class RoutingSettings(Strict):
    decisions: list[Decision] = Field(..., min_length=1)
    default_decision: str
    # Temperature by task type when a request sets none (SPEC §7 sampling matrix).
    sampling_matrix: dict[str, Temperature] = Field(default_factory=dict)
    # Per-signal settings owned by the routing package (thresholds, template files, ...).
    signals: SignalSettings = Field(default_factory=SignalSettings)

    @model_validator(mode="after")
    def _names(self) -> "RoutingSettings":
        names = [d.name for d in self.decisions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate decision names: {dupes}")
        if self.default_decision not in names:
            raise ValueError(f"default_decision {self.default_decision!r} is not a decision name")
        return self

    @model_validator(mode="after")
    def _condition_names(self) -> "RoutingSettings":
        # A condition naming a keyword list or bucket that does not exist would never match.
        for i, decision in enumerate(self.decisions):
            for cond in decision.rule_conditions():
                allowed = self.signals.condition_names(cond.type)
                if allowed is not None and cond.name not in allowed:
                    raise PathError(f"decisions[{i}].rules",
                                     f"condition {cond.type}:{cond.name} names nothing; "
                                     f"{cond.type} names are {sorted(allowed)}")
            if decision.sampling_class is not None and decision.sampling_class not in self.sampling_matrix:
                raise PathError(f"decisions[{i}].sampling_class",
                                 f"{decision.sampling_class!r} is not a key of sampling_matrix")
        return self
