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


def test_a_port_in_use_or_already_handed_out_is_skipped(monkeypatch):
    monkeypatch.setattr(lc, "_handed_out", set())
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", lc.STABLE_PORTS[0]))
        busy.listen()
        # Three candidates: the busy one is skipped, and the two free ones come once each
        # (the metrics and stats ports are picked back to back, before either is bound).
        monkeypatch.setattr(lc, "STABLE_PORTS", (lc.STABLE_PORTS[0], lc.STABLE_PORTS[0] + 3))
        first, second = lc.free_port(), lc.free_port()
        assert {first, second} == {lc.STABLE_PORTS[0] + 1, lc.STABLE_PORTS[0] + 2}
