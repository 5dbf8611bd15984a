"""Output contracts: ``response_format`` JSON enforcement and a decision's ``output_contract``."""

from .decision_contract import append_system_text, apply_output_contract
from .structured import (EnforcementResult, OutputContract, StructuredOutputError,
                         StructuredOutputPolicy, contract_from_request, enforce, enforce_detailed,
                         prepare_request)

__all__ = [
    "EnforcementResult", "OutputContract", "StructuredOutputError", "StructuredOutputPolicy",
    "append_system_text", "apply_output_contract", "contract_from_request", "enforce",
    "enforce_detailed", "prepare_request",
]
