"""Combine stored history with a request's messages, and fit the result to a model's context.

Clients differ: some send only the new message and rely on the session, others resend the whole
conversation each turn (or a recent window of it, possibly edited). :func:`align` finds where
the request's messages meet the stored history so that nothing is forwarded twice:

* the request's messages are authoritative for the part of the conversation they cover;
* stored messages older than that part are put in front of them;
* when the two do not overlap at all, the request continues the stored history.

Overlap is recognised where the *latest* stored messages reappear in the request: either the
request starts by repeating the end of the history, or it contains the history's last two
messages further in (it carries more of the conversation than the store does, e.g. after the
store trimmed old messages or the client edited an earlier one). A short new message that
happens to equal an older one ("continue") is therefore never mistaken for a resend.

Messages compare by role, content, name, tool calls and tool call id; a one-part text content
list equals the plain string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..errors import ContextLengthExceeded
from ..messages.view import estimate_tokens

Message = dict[str, Any]

# Keys that make a message what it is; the rest (reasoning_content, refusal: null, ...) is
# response decoration that clients drop when they resend a conversation.
IDENTITY_KEYS: tuple[str, ...] = ("role", "content", "name", "tool_calls", "tool_call_id")

# --------------------------------------------------------------------------- identity


def _normal_content(content: Any) -> Any:
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and content[0].get("type") == "text":
        return content[0].get("text", "")
    return content


def storable(message: Message) -> Message:
    """The message reduced to its identity keys (what the session store keeps)."""
    out = {k: message[k] for k in IDENTITY_KEYS if message.get(k) not in (None, "", [])}
    if "content" in out:
        out["content"] = _normal_content(out["content"])
    out.setdefault("role", message.get("role", "user"))
    if out["role"] == "assistant" and "content" not in out and "tool_calls" not in out:
        out["content"] = ""
    return out


def fingerprint(message: Message) -> str:
    return json.dumps(storable(message), sort_keys=True, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------- merging


def _split_system(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """(leading system messages, the conversation after them)."""
    i = 0
    while i < len(messages) and messages[i].get("role") in ("system", "developer"):
        i += 1
    return list(messages[:i]), list(messages[i:])


@dataclass(frozen=True)
class Alignment:
    # Stored conversation messages that go in front of the request's messages.
    kept_history: int
    # Index (in the request's conversation, system prompt excluded) of its first message the
    # store does not hold yet.
    first_new: int


def _align_fingerprints(history: list[str], request: list[str]) -> Alignment:
    h, r = len(history), len(request)
    if h == 0:
        return Alignment(0, 0)
    best: Optional[tuple[int, int]] = None  # (run length, end position in request)
    for end in range(r, 0, -1):
        run = 0
        while run < min(end, h) and request[end - 1 - run] == history[h - 1 - run]:
            run += 1
        if run == 0:
            continue
        # A run from the request's first message is a plain resend of the history's end;
        # a run further in must cover the last two stored messages to count as overlap.
        if run == end or run >= min(h, 2):
            if best is None or run > best[0]:
                best = (run, end)
    if best is None:
        return Alignment(h, 0)
    _, end = best
    # Request position 0 lines up with history position h - end; older history stays in front.
    return Alignment(max(0, h - end), end)


def align(history: Sequence[Message], request_messages: Sequence[Message]) -> Alignment:
    _, hist_conv = _split_system(history)
    _, req_conv = _split_system(request_messages)
    return _align_fingerprints([fingerprint(m) for m in hist_conv], [fingerprint(m) for m in req_conv])


def merge_history(history: list[Message], request_messages: list[Message]) -> list[Message]:
    """The messages to forward: the request's system prompt, then older stored history, then the
    request's conversation, each message once."""
    hist_system, hist_conv = _split_system(history)
    req_system, req_conv = _split_system(request_messages)
    alignment = align(history, request_messages)
    system = req_system or hist_system
    return [*system, *hist_conv[:alignment.kept_history], *req_conv]


def new_turn_messages(history: list[Message], request_messages: list[Message],
                      answer: Optional[Message]) -> list[Message]:
    """What to append to the bucket after answering: the request's messages the store does not
    hold yet (never the system prompt) plus the answer, reduced by :func:`storable`.

    ``history`` must be the history read for this request (before the answer).
    """
    _, req_conv = _split_system(request_messages)
    alignment = align(history, request_messages)
    turn = [storable(m) for m in req_conv[alignment.first_new:]]
    if answer is not None:
        turn.append(storable({**answer, "role": answer.get("role") or "assistant"}))
    return turn


# --------------------------------------------------------------------------- context fitting


def _turns(conversation: list[Message]) -> list[list[Message]]:
    """Split at user messages: a turn is a user message and the replies / tool exchanges after
    it. Trimming whole turns never orphans a tool result from its call and keeps the
    conversation starting with a user message, which strict chat templates require."""
    turns: list[list[Message]] = []
    for m in conversation:
        if m.get("role") == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def trim_to_context(messages: list[Message], max_tokens: int,
                    estimate: Callable[[Sequence[Message]], int] = estimate_tokens) -> list[Message]:
    """Drop the oldest turns until the messages fit ``max_tokens``; the system prompt and the
    latest turn always stay. Raises ContextLengthExceeded when even those do not fit."""
    system, conversation = _split_system(messages)
    turns = _turns(conversation)
    costs = [estimate(t) for t in turns]
    budget = max_tokens - estimate(system)
    first = 0
    while first < len(turns) - 1 and sum(costs[first:]) > budget:
        first += 1
    needed = estimate(system) + sum(costs[first:])
    if needed > max_tokens:
        raise ContextLengthExceeded(
            f"the request needs about {needed} tokens but the model's context allows {max_tokens} "
            "(after reserving room for the answer); shorten the latest message or the system prompt",
            param="messages")
    return [*system, *(m for t in turns[first:] for m in t)]


def history_budget(max_model_len: int, requested_max_tokens: Optional[int], output_reserve_tokens: int) -> int:
    """Tokens the prompt may use: the model's context minus room for the answer."""
    reserve = requested_max_tokens if requested_max_tokens is not None else output_reserve_tokens
    return max(0, max_model_len - reserve)
