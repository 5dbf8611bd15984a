"""The routing tests' fakes live in tests/fakes/routing.py (shared with the gateway tests)."""

from fakes.routing import *  # noqa: F401,F403
from fakes.routing import BagOfWordsEmbedder, ScriptedClassifier, chat, config, profile  # noqa: F401
