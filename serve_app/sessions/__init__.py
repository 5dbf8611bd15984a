"""Conversation sessions: per-task-type history buckets, merging and context trimming."""

from .context import history_budget, merge_history, new_turn_messages, trim_to_context
from .ids import session_id_from_headers
from .store import InProcessSessionStore, RedisSessionStore, SessionStore, build_session_store
from .turns import PreparedTurn, answer_message, prepare_turn, record_turn

__all__ = ["SessionStore", "InProcessSessionStore", "RedisSessionStore", "build_session_store",
           "merge_history", "new_turn_messages", "trim_to_context", "history_budget",
           "session_id_from_headers", "PreparedTurn", "prepare_turn", "record_turn", "answer_message"]
