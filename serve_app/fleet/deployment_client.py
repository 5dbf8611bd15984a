"""The part every handle client shares: its alias, its deployment and the fail-fast check."""

from __future__ import annotations

from typing import Optional

from ..errors import HorizonError, ModelUnavailable
from .availability import DeploymentBoard
from .errors import map_ray_error


class DeploymentClient:
    """What every handle client shares: its alias, its deployment and the fail-fast check."""

    def __init__(self, alias: str, deployment: str, board: Optional[DeploymentBoard]):
        self.alias = alias
        self.deployment = deployment
        self._board = board

    def check_up(self) -> None:
        if self._board is not None:
            self._board.check(self.deployment, self.alias)

    def failed(self, exc: BaseException) -> HorizonError:
        """A handle call's failure as a typed error; an unavailable model makes the board look
        at the deployment states again soon."""
        error = map_ray_error(self.alias, exc)
        if isinstance(error, ModelUnavailable) and self._board is not None:
            self._board.nudge()
        return error
