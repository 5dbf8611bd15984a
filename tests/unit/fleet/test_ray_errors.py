"""map_ray_error on a gRPC error of the fast mode's calls between deployments: its text is a
multi-line repr ending in ">", which once became the whole message ("model 'minicpm-v' failed:
>"); the status code and details say what happened."""

from __future__ import annotations

import grpc
import pytest

from serve_app.errors import UpstreamError
from serve_app.fleet.errors import map_ray_error


def test_a_grpc_error_is_named_by_its_status_and_details():
    exc = grpc.aio.AioRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                               details="Received message larger than max (7130000 vs. 4194304)")
    assert str(exc).strip().splitlines()[-1] == ">"   # what the message used to end with
    error = map_ray_error("minicpm-v", exc)
    assert isinstance(error, UpstreamError)
    assert error.message == ("model 'minicpm-v' failed: the call between deployments ended with "
                             "RESOURCE_EXHAUSTED: Received message larger than max (7130000 vs. 4194304)")


@pytest.mark.parametrize("exc, expected", [
    (RuntimeError("engine failed\nCUDA error: out of memory"), "model 'k2' failed: CUDA error: out of memory"),
    (ValueError(""), "model 'k2' failed: ValueError"),
])
def test_other_errors_keep_their_last_line(exc, expected):
    assert map_ray_error("k2", exc).message == expected
