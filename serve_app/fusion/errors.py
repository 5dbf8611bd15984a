"""Fusion's own failure type: the panel could not produce enough usable answers."""

from __future__ import annotations

from typing import Any

from ..errors import UpstreamError


class FusionPanelError(UpstreamError):
    """Quorum not met (``on_error: skip``) or a member failed (``on_error: fail``).

    Raised before any judge call. ``details`` lists every attempt (model, status, error) so the
    error body shows what failed; the ingress turns it into a 502 OpenAI error.
    """

    code = "fusion_panel_failed"

    def __init__(self, message: str, *, required: int, usable: int, on_error: str,
                 attempts: list[dict[str, Any]], decision: str):
        super().__init__(message, details={"fusion": self.trace(
            required=required, usable=usable, on_error=on_error, attempts=attempts,
            decision=decision)})
        self.required = required
        self.usable = usable
        self.attempts = attempts

    @staticmethod
    def trace(*, required: int, usable: int, on_error: str, attempts: list[dict[str, Any]],
              decision: str) -> dict[str, Any]:
        """The panel's facts as an error body carries them (``error.details.fusion``)."""
        return {"decision": decision, "on_error": on_error, "required": required,
                "usable": usable, "attempts": attempts,
                "failed_models": [a for a in attempts if a["status"] != "ok"]}
