"""SPEC §7 sampling matrix: a temperature per task (or sampling class) when the request sets none."""

from __future__ import annotations

from typing import Any


def apply_sampling_matrix(request: dict[str, Any], task_type: str, cfg: Any) -> dict[str, Any]:
    """A copy of ``request`` with ``temperature`` from the matrix when the client set none.

    ``cfg`` is a HorizonConfig or its RoutingSettings; ``task_type`` may also be a sampling
    class such as ``creative`` (see ``RoutingResult.sampling_key``). An explicit temperature,
    including 0, always wins.
    """
    routing = getattr(cfg, "routing", cfg)
    matrix: dict[str, float] = routing.sampling_matrix
    if request.get("temperature") is not None or task_type not in matrix:
        return request
    return {**request, "temperature": matrix[task_type]}
