"""The request pipeline: one chat request through model resolution, routing, authorisation and
its strategy (static or Fusion). Knows no HTTP; the api layer hands it a :class:`ChatCall`."""

from .context import ChatCall, ChatOutcome, RequestContext, Target
from .pipeline import ChatService

__all__ = ["ChatCall", "ChatOutcome", "ChatService", "RequestContext", "Target"]
