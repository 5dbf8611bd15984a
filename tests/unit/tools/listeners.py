"""A socket that accepts connections on 127.0.0.1, for tests of commands that check whether
something answers at an address (a GCS, a port)."""

from __future__ import annotations

import contextlib
import socket
from typing import Iterator


@contextlib.contextmanager
def listening(family: int = socket.AF_INET, host: str = "127.0.0.1") -> Iterator[int]:
    """A socket that accepts connections, for as long as the block runs; yields its port."""
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        sock.listen()
        yield sock.getsockname()[1]
