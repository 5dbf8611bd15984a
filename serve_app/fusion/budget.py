"""Fitting the panel's answers into the judge's context window.

The judge reads the original conversation and every panel answer, and must still have room to
write. A small judge window (the CPU profile's 2,048 tokens) or a talkative panel would make the
analysis or synthesis call fail for context length after the whole panel already ran. So before
each judge call the answers are budgeted:

* the fixed part of the prompt (template, conversation, analysis) and the room reserved for the
  judge's answer are taken from the window first; what is left is shared by the answers;
* the sharing is fair by water-filling: every answer may use an equal share, an answer shorter
  than its share keeps all of it and hands the rest to the longer ones, so only the longest
  answers are cut, and all of them to the same length;
* an answer is cut at a word boundary with a visible marker, and the trace records, per member,
  the estimated tokens before and after.

Token counts are the project's one estimate (:func:`serve_app.messages.view.estimate_text_tokens`),
which errs high; a margin covers the chat template around the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..messages.view import estimate_text_tokens

CUT_MARKER = " […] (cut to fit the judge's context: {cut} of {total} estimated tokens left out)"
# The chat template, role markers and the marker text itself.
TEMPLATE_MARGIN_TOKENS = 48
# Room the judge's answer keeps when neither the request nor the model sets a limit.
DEFAULT_ANSWER_RESERVE_TOKENS = 256
# Room the separate-mode analysis keeps: the bounds of fusion-v1's analysis_schema.json allow
# about 470 tokens at most; most analyses need a third of that.
ANALYSIS_RESERVE_TOKENS = 384


@dataclass(frozen=True)
class MemberBudget:
    model: str
    index: int
    tokens: int
    kept_tokens: int

    @property
    def cut(self) -> bool:
        return self.kept_tokens < self.tokens

    def trace(self) -> dict:
        return {"model": self.model, "index": self.index, "estimated_tokens": self.tokens,
                "kept_tokens": self.kept_tokens, "cut": self.cut}


@dataclass(frozen=True)
class FittedAnswers:
    texts: list[str]
    members: list[MemberBudget]
    available_tokens: int

    @property
    def any_cut(self) -> bool:
        return any(m.cut for m in self.members)

    def trace(self) -> dict:
        return {"answer_tokens_available": self.available_tokens,
                "members": [m.trace() for m in self.members]}


def fair_shares(sizes: Sequence[int], available: int) -> list[int]:
    """Water-filling: the most each answer keeps so that the sum fits ``available``.

    Answers at or under the common level keep their size; the longer ones are all cut to it.
    """
    if sum(sizes) <= available:
        return list(sizes)
    shares = [0] * len(sizes)
    left, remaining = max(0, available), sorted(range(len(sizes)), key=lambda i: sizes[i])
    while remaining:
        level = left // len(remaining)
        i = remaining[0]
        if sizes[i] <= level:
            shares[i] = sizes[i]
            left -= sizes[i]
            remaining.pop(0)
        else:
            for j in remaining:
                shares[j] = level
            break
    return shares


def cut_text(text: str, keep_tokens: int, total_tokens: int) -> str:
    """``text`` shortened to about ``keep_tokens`` estimated tokens, at a word boundary."""
    if keep_tokens >= total_tokens:
        return text
    marker = CUT_MARKER.format(cut=total_tokens - keep_tokens, total=total_tokens)
    if keep_tokens <= 0:
        return marker.strip()
    # Characters in proportion to the kept share, then back to the last whitespace.
    end = max(1, int(len(text) * keep_tokens / max(total_tokens, 1)))
    while end > 1 and estimate_text_tokens(text[:end]) > keep_tokens:
        end = int(end * 0.9)
    space = text.rfind(" ", 0, end)
    if space > end * 0.6:
        end = space
    return text[:end].rstrip() + marker


def fit_answers(texts: Sequence[str], models: Sequence[str], indices: Sequence[int],
                available_tokens: int) -> FittedAnswers:
    sizes = [estimate_text_tokens(t) for t in texts]
    shares = fair_shares(sizes, available_tokens)
    members = [MemberBudget(m, i, size, share) for m, i, size, share in zip(models, indices, sizes, shares)]
    fitted = [cut_text(t, share, size) for t, share, size in zip(texts, shares, sizes)]
    return FittedAnswers(fitted, members, available_tokens)


def answer_reserve(window: int, requested: Optional[int], model_default: Optional[int]) -> int:
    """Tokens kept for the judge's own answer while budgeting its prompt."""
    reserve = requested or model_default or DEFAULT_ANSWER_RESERVE_TOKENS
    # Never more than half the window: the answers must keep some room.
    return max(1, min(reserve, window // 2))


def completion_room(window: int, prompt_tokens: int, requested: Optional[int],
                    model_default: Optional[int]) -> int:
    """``max_tokens`` of a judge call: what the window leaves after the prompt, no more than the
    request's (or the model's configured) limit."""
    room = max(1, window - prompt_tokens - TEMPLATE_MARGIN_TOKENS)
    limit = requested or model_default
    return min(room, limit) if limit else room
