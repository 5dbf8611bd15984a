"""The two calls the ingress makes per request: read before routing hands off, write after.

    turn = await prepare_turn(store, session_id, task_type, body["messages"], prompt_budget=n)
    ... run the algorithm on turn.messages ...
    await record_turn(store, turn, answer_message(response))

Without a session id both are pass-throughs. Failed requests record nothing: the client will
resend the same message, and a stored question without its answer would be sent twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..messages.view import first_choice
from .context import merge_history, new_turn_messages, trim_to_context
from .store import SessionStore


@dataclass(frozen=True)
class PreparedTurn:
    session_id: Optional[str]
    task_type: str
    # The bucket as read for this request (needed to know which messages are new).
    history: list[dict] = field(default_factory=list)
    request_messages: list[dict] = field(default_factory=list)
    # What the model receives: system prompt, older stored history, the request's messages.
    messages: list[dict] = field(default_factory=list)


async def prepare_turn(store: SessionStore, session_id: Optional[str], task_type: str,
                       request_messages: list[dict], *, prompt_budget: Optional[int]) -> PreparedTurn:
    """Merge the task type's stored history into the request and trim it to ``prompt_budget``
    tokens (see :func:`~serve_app.sessions.context.history_budget`).

    A stateless request (no session) is forwarded unchanged: trimming what a client sent on
    its own would silently change its request. Raises ContextLengthExceeded when the system
    prompt and the latest turn alone exceed the budget.
    """
    if session_id is None:
        return PreparedTurn(None, task_type, [], list(request_messages), list(request_messages))
    history = await store.history(session_id, task_type)
    merged = merge_history(history, request_messages)
    if prompt_budget is not None:
        merged = trim_to_context(merged, prompt_budget)
    return PreparedTurn(session_id, task_type, history, list(request_messages), merged)


async def record_turn(store: SessionStore, turn: PreparedTurn, answer: Optional[dict]) -> None:
    """Append the turn's new messages and the answer to the task type's bucket."""
    if turn.session_id is None or answer is None:
        return
    messages = new_turn_messages(turn.history, turn.request_messages, answer)
    await store.append(turn.session_id, turn.task_type, messages)


def answer_message(response: dict[str, Any]) -> Optional[dict]:
    """The assistant message of an OpenAI ``chat.completion`` (None when it has no choice)."""
    message = first_choice(response).get("message")
    return dict(message) if isinstance(message, dict) else None
