"""The request pipeline: one chat request through model resolution, routing, authorisation and
its strategy (static or Fusion), and text completions through the same gates
(:mod:`.completions`). Knows no HTTP; the api layer hands it a :class:`ChatCall` or a
:class:`CompletionCall`."""

from .completions import CompletionCall
from .context import ChatCall, ChatOutcome, RequestContext, Target
from .pipeline import ChatService

__all__ = ["ChatCall", "ChatOutcome", "ChatService", "CompletionCall", "RequestContext", "Target"]
