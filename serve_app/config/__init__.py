"""Configuration: the profile schema, split by domain, and its loader (imports nothing else of
the project)."""

from .base import TASK_TYPES
from .loader import ConfigError, load_config, parse_config, read_document
from .schema import HorizonConfig

__all__ = ["ConfigError", "HorizonConfig", "TASK_TYPES", "load_config", "parse_config", "read_document"]
