"""Conversation sessions: per-task-type history buckets, merging and context trimming."""

from .context import history_budget, merge_history, new_turn_messages, trim_to_context
from .ids import session_id_from_headers
from .store import InProcessSessionStore, RedisSessionStore, SessionStore, build_session_store

__all__ = ["SessionStore", "InProcessSessionStore", "RedisSessionStore", "build_session_store",
           "merge_history", "new_turn_messages", "trim_to_context", "history_budget",
           "session_id_from_headers"]
