"""The one error type of the capacity package."""

from __future__ import annotations


class PlacementError(ValueError):
    """A placement that cannot work on the profile's cluster; names the model and the reason."""

    def __init__(self, model: str, reason: str):
        super().__init__(f"{model}: {reason}")
        self.model = model
        self.reason = reason
