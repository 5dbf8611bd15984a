"""Access control: hashed Bearer API keys, per-key permissions and rate limits."""

from .keys import ANONYMOUS, ApiKeyAuthenticator, Principal, hash_key

__all__ = ["ApiKeyAuthenticator", "Principal", "ANONYMOUS", "hash_key"]
