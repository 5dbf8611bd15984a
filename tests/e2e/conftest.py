"""One Ray cluster per test session, shared by every e2e test.

Profiles are deployed as separate Serve applications on one HTTP port (``/sim`` and
``/local`` route prefixes) and reused across tests; a test that needs different settings
redeploys its application with overrides (every replica restarts: about a minute on 2 cores).
"""

from __future__ import annotations

import copy
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import httpx
import pytest

from serve_app.tools.local_cluster import free_port, remove_haproxy_files

ROOT = Path(__file__).resolve().parents[2]


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``overrides`` merged as live settings merge into a profile."""
    from serve_app.config.live import merge_settings

    return copy.deepcopy(merge_settings(base, overrides))


def profile_args(name: str) -> dict[str, Any]:
    from serve_app.config.loader import horizon_args, read_document

    return dict(horizon_args(read_document(ROOT / "configs" / f"{name}.yaml")))


def wait_ready(url: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Poll /health until the ingress says ready (routing started, every model healthy)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", timeout=30)
            last = r.json()
            if r.status_code == 200 and last.get("status") == "ready":
                return last
        except (httpx.HTTPError, ValueError) as exc:
            last = repr(exc)
        time.sleep(1.0)
    raise TimeoutError(f"{url} not ready after {timeout_s}s: {last}")


def _running_ingress_replicas(app: str) -> int:
    from ray import serve

    from serve_app.fleet.names import INGRESS_DEPLOYMENT

    status = serve.status().applications.get(app)
    dep = status.deployments.get(INGRESS_DEPLOYMENT) if status is not None else None
    if dep is None:
        return 0
    return sum(n for state, n in dep.replica_states.items()
               if str(getattr(state, "value", state)).endswith("RUNNING"))


def wait_every_ingress_ready(app: str, url: str, seen_before: set[str], timeout_s: float = 600.0,
                             statuses: tuple[str, ...] = ("ready",)) -> set[str]:
    """Poll /health until as many ingress replicas as Serve runs for ``app`` have each said
    ready (a status in ``statuses``), counting only replicas not in ``seen_before`` (the
    previous deployment's).

    One ready answer is not enough after a redeploy: the profile may run two ingress
    replicas (the autoscaled count survives a redeploy), and a replica that has just started
    answers 503 until its router is up, so the answer may come from the one that is ready
    while the next request goes to the one that is not. Returns the replicas seen ready."""
    deadline = time.monotonic() + timeout_s
    ready: set[str] = set()
    last: Any = None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", headers={"x-vsr-debug": "true"}, timeout=30)
            last = r.json()
            replica = r.headers.get("x-vsr-replica", "")
            if r.status_code == 200 and last.get("status") in statuses and replica not in seen_before:
                ready.add(replica)
                running = _running_ingress_replicas(app)
                if running and len(ready) >= running:
                    return ready
        except (httpx.HTTPError, ValueError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise TimeoutError(f"{url}: {len(ready)} new ingress replica(s) ready after {timeout_s}s: {last}")


def serve_log_lines(pattern: str, needle: str, within_s: float = 0.0) -> list[str]:
    """Lines holding ``needle`` in this session's Serve log files matching ``pattern`` (e.g.
    ``replica_sim_ingress_*.log``), waiting up to ``within_s`` for one to appear."""
    import ray

    serve_logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
    deadline = time.monotonic() + within_s
    while True:
        lines = [line for path in serve_logs.glob(pattern)
                 for line in path.read_text(errors="replace").splitlines() if needle in line]
        if lines or time.monotonic() >= deadline:
            return lines
        time.sleep(0.1)


@dataclass
class ServedProfile:
    name: str
    url: str            # e.g. http://127.0.0.1:PORT/sim  (OpenAI base_url = url + "/v1")
    args: dict[str, Any]
    _deploy: Callable[[dict[str, Any]], None]
    # Ingress replicas that said ready under an earlier deployment of this profile.
    ready_replicas: set[str] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def deploy(self, overrides: Optional[dict[str, Any]] = None) -> None:
        """Redeploy this profile with ``overrides`` deep-merged into its args (None = original),
        and return once every ingress replica of the new deployment is ready."""
        self.deploy_args(deep_merge(self.args, overrides or {}))

    def deploy_args(self, args: dict[str, Any], timeout_s: float = 600.0,
                    statuses: tuple[str, ...] = ("ready",)) -> None:
        """Redeploy with exactly ``args``; return once every new ingress replica's /health
        status is one of ``statuses``."""
        self._deploy(args)
        self.ready_replicas |= wait_every_ingress_ready(self.name, self.url, self.ready_replicas,
                                                        timeout_s, statuses)

    @contextmanager
    def variant(self, name: str, overrides: Optional[dict[str, Any]] = None, *,
                args: Optional[dict[str, Any]] = None, timeout_s: float = 600.0,
                statuses: tuple[str, ...] = ("ready",)) -> Iterator["ServedProfile"]:
        """This profile with ``overrides`` deep-merged into its args (or exactly ``args``), as
        an application of its own at ``/name`` on the same cluster, deleted on exit.

        One deployment where redeploying this profile cost two (the change, then the original
        back), and the tests after never run on a profile a failed test left changed: on a
        2-core CI machine in a slow phase each deployment of the simulated fleet took minutes."""
        from ray import serve

        app_args = args if args is not None else deep_merge(self.args, overrides or {})
        profile = ServedProfile(name, f"{self.url.rsplit('/', 1)[0]}/{name}", app_args, _deployer(name))
        try:
            profile.deploy_args(app_args, timeout_s=timeout_s, statuses=statuses)
            yield profile
        finally:
            serve.delete(name)


@pytest.fixture(scope="session")
def serve_cluster():
    """Start Ray and Serve once for the session (logical CPUs let the whole graph fit 2 cores)."""
    import ray
    from ray import serve

    port = int(os.environ.get("HORIZON_TEST_HTTP_PORT", free_port()))
    # address="local": always a fresh cluster, never one that happens to run on this machine.
    ray.init(address="local", num_cpus=int(os.environ.get("HORIZON_TEST_RAY_CPUS", "16")),
             include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    node_id = ray.get_runtime_context().get_node_id()
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
    # The folder Serve's HAProxy wrote for this node (each start makes one; horizon stop
    # removes its own the same way).
    remove_haproxy_files(node_id)


def _deployer(name: str) -> Callable[[dict[str, Any]], None]:
    def deploy(args: dict[str, Any]) -> None:
        from ray import serve

        from serve_app.app import build_app

        serve.run(build_app(args), name=name, route_prefix=f"/{name}")
    return deploy


@pytest.fixture(scope="session")
def serve_sim(serve_cluster, redis_url) -> ServedProfile:
    """The simulated six-model fleet, at test speed, with its sessions and rate limits in the
    test Redis (the profile runs up to two ingress replicas) under keys of this run only."""
    run = uuid.uuid4().hex[:8]
    args = deep_merge(profile_args("sim"), {
        "simulation": {"latency_scale": 0.01},
        "sessions": {"redis_url": redis_url, "key_prefix": f"horizon:e2e-sim:{run}:session:"},
        "auth": {"redis_key_prefix": f"horizon:e2e-sim:{run}:ratelimit:"}})
    profile = ServedProfile("sim", f"{serve_cluster}/sim", args, _deployer("sim"))
    profile.deploy()
    return profile


@pytest.fixture(scope="session")
def serve_local(serve_cluster) -> ServedProfile:
    """The embedded CPU default: one real vLLM engine (SmolLM2-135M) + the real MiniLM."""
    from deployments.model_assets import build_smollm2

    build_smollm2()
    profile = ServedProfile("local", f"{serve_cluster}/local", profile_args("local"), _deployer("local"))
    profile.deploy()
    return profile
