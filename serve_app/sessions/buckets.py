"""Bucket coordinates shared by every session store: (session id, task type)."""

from __future__ import annotations

from ..config.base import TASK_TYPES


def check_bucket(session_id: str, task_type: str) -> None:
    """Bucket coordinates are code-supplied; a wrong one is a bug, not a client error."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {list(TASK_TYPES)}")
    if not session_id:
        raise ValueError("empty session id")


def bucket_key(key_prefix: str, session_id: str, task_type: str) -> str:
    """The Redis key of one bucket: ``{prefix}{session}:{task}``."""
    return f"{key_prefix}{session_id}:{task_type}"
