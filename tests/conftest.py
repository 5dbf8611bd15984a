"""Test-wide settings and the shared Redis server fixtures.

Ray Serve reads its fast-mode switches when the controller and proxy start, and those inherit
this process's environment at ``ray.init``, so they are set here, before any test starts Ray:
the tests run the same mode the project runs by default.

Tests that need a REAL Redis (the session store, the shared rate limiter) take ``redis_url``:
the server on HORIZON_TEST_REDIS_PORT (default 6399) is reused when it already answers (the CI
starts it) and otherwise started through scripts/redis.sh and stopped after the session. A test
owning a second server (to stop it mid-test) uses ``redis_servers``; ``redis_prefix`` gives a
test its own key prefix and deletes its keys afterwards. Tests skip only when the script cannot
provide a server (no redis-server and no way to install it); the reason it gives is in the skip
message.

``metrics`` records what the code emits (``RecordingMetrics``) for the duration of a test.
"""

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from serve_app.tools.local_cluster import apply_serve_env

REPO = Path(__file__).resolve().parents[1]
REDIS_PORT = int(os.environ.get("HORIZON_TEST_REDIS_PORT", "6399"))


# What `horizon serve` runs the cluster with; HAProxy's own frontends on free ports, as the
# suite may run beside another Serve cluster.
apply_serve_env(os.environ, free_haproxy_ports=True)
# A stopping ingress replica in the fast mode stays open Ray's minimum draining period (30 s),
# so that load balancers in front deregister it before it refuses connections; every redeploy
# or deletion of an application waits for it. The suite redeploys the simulated fleet about
# twenty times, behind the one local HAProxy, which retries a refused connection on another
# replica: 5 s is enough there, and saves ~25 s per redeploy. Users keep Ray's default (the
# first-run test starts `horizon serve` with a clean environment).
os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "5")


class RedisServers:
    """Throwaway redis-server processes on 127.0.0.1 through scripts/redis.sh."""

    script_path = REPO / "scripts" / "redis.sh"

    def script(self, verb: str, port: int) -> subprocess.CompletedProcess:
        # Installing the package on a fresh machine can take a few minutes.
        return subprocess.run(["bash", str(self.script_path), verb, str(port)], capture_output=True,
                              text=True, timeout=600)

    def start_or_skip(self, port: int) -> bool:
        """Start a server on ``port``; True when this call started it (so the caller stops it)."""
        if self.script("status", port).returncode == 0:
            return False
        result = self.script("start", port)
        if result.returncode != 0:
            pytest.skip(f"no Redis server available: scripts/redis.sh start {port} failed: "
                        f"{(result.stderr or result.stdout).strip()[-600:]}")
        return True

    @staticmethod
    def url(port: int) -> str:
        return f"redis://127.0.0.1:{port}/0"


@pytest.fixture(scope="session")
def redis_servers() -> RedisServers:
    return RedisServers()


@pytest.fixture(scope="session")
def redis_url(redis_servers):
    started = redis_servers.start_or_skip(REDIS_PORT)
    yield redis_servers.url(REDIS_PORT)
    if started:
        redis_servers.script("stop", REDIS_PORT)


@pytest.fixture
def redis_prefix(redis_url):
    """A key prefix of this test only; its keys are deleted afterwards."""
    import redis

    value = f"horizon-test:{uuid.uuid4().hex[:12]}:"
    yield value
    raw = redis.Redis.from_url(redis_url)
    keys = list(raw.scan_iter(match=f"{value}*"))
    if keys:
        raw.delete(*keys)
    raw.close()


@pytest.fixture
def metrics():
    """The metrics the code emits during this test, recorded instead of exported."""
    from serve_app.observability.metrics import configure_metrics
    from serve_app.observability.recording import RecordingMetrics

    recorder = RecordingMetrics()
    configure_metrics(factory=recorder)
    yield recorder
    configure_metrics()
