"""Configuration: the profile schema and its loader (imports nothing else of the project)."""

from .loader import ConfigError, load_config, parse_config, read_document
from .schema import TASK_TYPES, HorizonConfig

__all__ = ["ConfigError", "HorizonConfig", "TASK_TYPES", "load_config", "parse_config", "read_document"]
