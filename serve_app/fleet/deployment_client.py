"""The part every handle client shares: its alias, its deployment and the fail-fast check."""

from __future__ import annotations

from typing import Optional

from .availability import DeploymentBoard


class DeploymentClient:
    """What every handle client shares: its alias, its deployment and the fail-fast check."""

    def __init__(self, alias: str, deployment: str, board: Optional[DeploymentBoard]):
        self.alias = alias
        self.deployment = deployment
        self._board = board

    def check_up(self) -> None:
        if self._board is not None:
            self._board.check(self.deployment, self.alias)
