"""free_port: a port that stays free while Ray and HAProxy start (serve_app.tools.local_cluster)."""

import socket

from serve_app.tools import local_cluster as lc


def test_the_port_is_free_and_outside_where_ray_and_the_kernel_pick_theirs():
    eph_low, eph_high = lc._ephemeral_range()
    for _ in range(20):
        port = lc.free_port()
        assert lc.STABLE_PORTS[0] <= port < lc.STABLE_PORTS[1]   # above Ray's worker ports
        assert not eph_low <= port <= eph_high
        with socket.socket() as s:   # and really free on every interface
            s.bind(("0.0.0.0", port))


def test_a_port_in_use_is_never_handed_out(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", lc.STABLE_PORTS[0]))
        busy.listen()
        # Only two candidates: the busy one must be skipped.
        monkeypatch.setattr(lc, "STABLE_PORTS", (lc.STABLE_PORTS[0], lc.STABLE_PORTS[0] + 2))
        assert {lc.free_port() for _ in range(10)} == {lc.STABLE_PORTS[0] + 1}
