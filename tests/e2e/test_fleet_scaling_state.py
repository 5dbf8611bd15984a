"""State that must hold across the fleet on real Ray Serve (issue 16).

The simulated fleet runs as an application of its own (``/fleet-state``) with TWO ingress
replicas, its sessions and API-key rate limits in a Redis of this module's own
(``scripts/redis.sh`` on HORIZON_TEST_REDIS_FLEET_PORT, default 6396), so the module can stop it
mid-run without disturbing other tests. Each answer to an
``x-vsr-debug: true`` request names the ingress replica that served it (``x-vsr-replica``):

* a conversation whose turns land on both replicas keeps its per-task history, Fusion turns too,
  and a Responses chain (``previous_response_id``) continues on either replica;
* one key's burst holds across both replicas (total admitted = burst);
* Redis stopped mid-run: requests are still answered, ``/health`` is degraded and says why, the
  store-error metric counts it; Redis back: healthy again;
* a second application in the cluster has its own breaker registry: tripping its breaker for
  ``k2`` leaves ``/fleet-state``'s ``k2`` closed, and each keeps its own settings;
* the registry actor answers a replica's watch as soon as another replica's failures open a
  breaker;
* a crashed state actor comes back (Ray restarts it) with the application's breaker settings;
* the actors an in-place upgrade left under earlier names are ended while the application runs
  this code; another application's are not;
* a state actor that ended for good is made again, and the replicas' breaker stores push to the
  new one.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from serve_app.app_scoped import ABSENT_CHECKS, CHECK_INTERVAL_S, state_actor_name

pytestmark = pytest.mark.e2e

PORT = int(os.environ.get("HORIZON_TEST_REDIS_FLEET_PORT", "6396"))
PREFIX = f"horizon:e2e-fleet:{uuid.uuid4().hex[:8]}:"
FULL_KEY, BURST_KEY, OUTAGE_KEY = "sk-fleet-full", "sk-fleet-burst", "sk-fleet-outage"
BURST = 3


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def fleet_redis(redis_servers):
    started = redis_servers.start_or_skip(PORT)
    yield redis_servers
    if started or redis_servers.script("status", PORT).returncode == 0:
        redis_servers.script("stop", PORT)


@pytest.fixture(scope="module")
def two_ingress(serve_sim, fleet_redis):
    url = fleet_redis.url(PORT)
    with serve_sim.variant("fleet-state", {
        "global": {"server": {"min_replicas": 2, "max_replicas": 2}},
        "sessions": {"backend": "redis", "redis_url": url, "key_prefix": f"{PREFIX}session:",
                     "responses_key_prefix": f"{PREFIX}response:", "redis_timeout_s": 0.25},
        "auth": {"enabled": True, "rate_limit_store": "redis", "redis_url": url,
                 "redis_key_prefix": f"{PREFIX}ratelimit:", "keys": [
                     {"name": "full", "sha256": _sha(FULL_KEY)},
                     # 6 a minute: one token every 10 s, so a burst is not topped up mid-test.
                     {"name": "burst", "sha256": _sha(BURST_KEY), "requests_per_minute": 6, "burst": BURST},
                     {"name": "outage", "sha256": _sha(OUTAGE_KEY), "requests_per_minute": 6, "burst": BURST}]},
    }) as profile:
        try:
            yield profile
        finally:
            if fleet_redis.script("status", PORT).returncode != 0:
                fleet_redis.script("start", PORT)


def _post(profile, body: dict[str, Any], key: str = FULL_KEY, session: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "x-vsr-debug": "true"}
    if session:
        headers["X-Session-ID"] = session
    return httpx.post(f"{profile.base_url}/chat/completions", json=body, headers=headers, timeout=120)


def _turns_on_both_replicas(send, max_turns: int = 12, min_turns: int = 3) -> list[tuple[str, int]]:
    """Send turns until two consecutive turns were served by different ingress replicas."""
    seen: list[tuple[str, int]] = []
    for i in range(max_turns):
        r = send(i)
        assert r.status_code == 200, r.text
        seen.append((r.headers["x-vsr-replica"], r.json()["usage"]["prompt_tokens"]))
        switched = any(a[0] != b[0] for a, b in zip(seen, seen[1:]))
        if switched and len(seen) >= min_turns:
            return seen
    raise AssertionError(f"every turn landed on one ingress replica: {seen}")


def test_a_conversation_keeps_its_history_across_ingress_replicas(two_ingress):
    session = f"conv-{uuid.uuid4().hex[:6]}"
    seen = _turns_on_both_replicas(lambda i: _post(two_ingress, {
        "model": "qwen-72b", "max_tokens": 8,
        "messages": [{"role": "user", "content": f"turn {i}: tell me something about rivers"}]}, session=session))
    # The model received every earlier turn, whichever replica served it: the prompt grows.
    tokens = [t for _, t in seen]
    assert all(b > a for a, b in zip(tokens, tokens[1:])), seen
    assert len({replica for replica, _ in seen}) == 2


def test_fusion_turns_honour_the_session_across_ingress_replicas(two_ingress):
    session = f"fusion-{uuid.uuid4().hex[:6]}"
    seen = _turns_on_both_replicas(lambda i: _post(two_ingress, {
        "model": "vllm-sr/fusion", "max_tokens": 8,
        "messages": [{"role": "user", "content": f"ask the panel of models, question {i}: tabs or spaces?"}]},
        session=session), max_turns=8, min_turns=2)
    tokens = [t for _, t in seen]
    # Panel and judge prompts carry the earlier Fusion turns: the run's prompt tokens grow.
    assert all(b > a for a, b in zip(tokens, tokens[1:])), seen


def test_a_responses_chain_continues_across_ingress_replicas(two_ingress):
    # Each turn continues the previous stored response by id alone; the turns land on both
    # replicas, so each replica reads responses the other one stored.
    previous: list[str] = []

    def send(i: int) -> httpx.Response:
        body = {"model": "qwen-72b", "max_output_tokens": 8, "input": f"turn {i}: tell me about rivers"}
        if previous:
            body["previous_response_id"] = previous[-1]
        r = httpx.post(f"{two_ingress.base_url}/responses", json=body, timeout=120,
                       headers={"authorization": f"Bearer {FULL_KEY}", "x-vsr-debug": "true"})
        if r.status_code == 200:
            previous.append(r.json()["id"])
        return r

    seen = []
    for i in range(12):
        r = send(i)
        assert r.status_code == 200 and r.json()["store"] is True, r.text
        seen.append((r.headers["x-vsr-replica"], r.json()["usage"]["input_tokens"]))
        if len(seen) >= 3 and any(a[0] != b[0] for a, b in zip(seen, seen[1:])):
            break
    assert len({replica for replica, _ in seen}) == 2, seen
    tokens = [t for _, t in seen]
    assert all(b > a for a, b in zip(tokens, tokens[1:])), seen    # every earlier turn was forwarded
    stored = httpx.get(f"{two_ingress.base_url}/responses/{previous[0]}", timeout=30,
                       headers={"authorization": f"Bearer {FULL_KEY}"})
    assert stored.status_code == 200 and stored.json()["id"] == previous[0]


def test_concurrent_turns_in_one_conversation_all_land_across_ingress_replicas(two_ingress):
    # Eight responses answered at once in one conversation, spread over both replicas: each
    # adds its turn with an atomic update on Redis, so none overwrites another's.
    auth = {"authorization": f"Bearer {FULL_KEY}", "x-vsr-debug": "true"}
    conv = httpx.post(f"{two_ingress.base_url}/conversations", json={}, headers=auth, timeout=30).json()

    def send(i: int) -> httpx.Response:
        return httpx.post(f"{two_ingress.base_url}/responses", headers=auth, timeout=120, json={
            "model": "qwen-72b", "max_output_tokens": 8, "input": f"turn {i}", "conversation": conv["id"]})

    answers: list[httpx.Response] = []
    with ThreadPoolExecutor(8) as pool:
        for first in (0, 8, 16):   # until both replicas took turns (Serve spreads them; not promised)
            answers += pool.map(send, range(first, first + 8))
            if len({r.headers.get("x-vsr-replica") for r in answers}) == 2:
                break
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
    assert len({r.headers["x-vsr-replica"] for r in answers}) == 2
    listed = httpx.get(f"{two_ingress.base_url}/conversations/{conv['id']}/items", headers=auth, timeout=30,
                       params={"order": "asc", "limit": 100}).json()["data"]
    inputs = sorted(item["content"][0]["text"] for item in listed if item.get("role") == "user")
    assert inputs == sorted(f"turn {i}" for i in range(len(answers)))
    assert {item["id"] for item in listed} >= {r.json()["output"][0]["id"] for r in answers}


def test_one_keys_burst_holds_across_both_ingress_replicas(two_ingress):
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        r = _post(two_ingress, {"model": "qwen-72b", "max_tokens": 4,
                                "messages": [{"role": "user", "content": f"burst {i}"}]}, key=BURST_KEY)
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] * BURST + [429] * (12 - BURST), codes
    assert all(float(r.headers["retry-after"]) > 0 for r in answers if r.status_code == 429)
    # Both replicas answered for this key, and together they admitted exactly the burst.
    assert len({r.headers["x-vsr-replica"] for r in answers}) == 2


def _metric_total(name: str, **labels: str) -> float:
    import ray

    node = next(n for n in ray.nodes() if n["Alive"])
    text = httpx.get(f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_redis_stopped_mid_run_keeps_answering_and_health_says_so(two_ingress, fleet_redis):
    session = f"outage-{uuid.uuid4().hex[:6]}"
    assert _post(two_ingress, {"model": "qwen-72b", "max_tokens": 4,
                               "messages": [{"role": "user", "content": "before the outage"}]},
                 session=session).status_code == 200
    assert fleet_redis.script("stop", PORT).returncode == 0
    try:
        # Still answered (without history); the shared limit falls back to each replica's bucket.
        for i in range(4):
            r = _post(two_ingress, {"model": "qwen-72b", "max_tokens": 4,
                                    "messages": [{"role": "user", "content": f"during the outage {i}"}]},
                      session=session)
            assert r.status_code == 200, r.text
        limited = [_post(two_ingress, {"model": "qwen-72b", "max_tokens": 4,
                                       "messages": [{"role": "user", "content": f"limit {i}"}]}, key=OUTAGE_KEY)
                   for i in range(10)]
        codes = [r.status_code for r in limited]
        assert set(codes) <= {200, 429} and 429 in codes, codes
        # Each replica limits on its own while Redis is down: at most one burst each.
        assert codes.count(200) <= 2 * BURST, codes
        assert all(float(r.headers["retry-after"]) > 0 for r in limited if r.status_code == 429)
        # /health (either replica) names what happened.
        for _ in range(4):
            body = httpx.get(f"{two_ingress.url}/health", timeout=30).json()
            assert body["status"] == "degraded", body["shared_state"]
            sessions = body["shared_state"]["sessions"]
            assert sessions["reachable"] is False and sessions["meanwhile"] == "serving without history"
            assert body["shared_state"]["rate_limits"]["meanwhile"] == "limiting per replica"
        # ... and so does the metric (Ray exports it within a few seconds).
        deadline = time.monotonic() + 60
        while _metric_total("ray_horizon_session_store_errors_total", application=two_ingress.name) <= 0:
            assert time.monotonic() < deadline, "horizon_session_store_errors never exported"
            time.sleep(2)
    finally:
        assert fleet_redis.script("start", PORT).returncode == 0
    deadline = time.monotonic() + 30
    while httpx.get(f"{two_ingress.url}/health", timeout=30).json()["status"] != "ready":
        assert time.monotonic() < deadline, "not ready again after Redis came back"
        time.sleep(1)


# --------------------------------------------------------------------------- breakers


def _breaker_app(name: str) -> dict[str, Any]:
    """A one-model application whose k2 always fails, with a breaker of its own settings."""
    return {
        "profile": name,
        "models": [{"alias": "k2", "role": "coordinator", "backend": "simulated",
                    "engine": {"model": "sim/k2"}, "placement": {"num_cpus": 0.05},
                    "simulated": {"ttft_ms": 10, "tpot_ms": 1, "output_tokens": 4, "error_rate": 1.0}}],
        "routing": {"default_decision": "all", "decisions": [{"name": "all", "modelRefs": [{"model": "k2"}]}],
                    "signals": {"intent": {"classifier": {"enabled": False}}}},
        "resilience": {"breaker": {"failure_threshold": 2, "probe_interval_s": 120}},
    }


def test_a_second_application_has_its_own_breakers_and_settings_and_they_end_with_it(serve_cluster, two_ingress):
    """Two applications in one cluster keep separate breaker registries; a deleted application's
    detached state actor (its registry and demand board) ends on its own (serve_app.app_scoped),
    with the default check interval, while the other application's stays."""
    other = two_ingress
    import ray
    from ray import serve

    from serve_app.app import build_app

    name = "breakerb"
    serve.run(build_app(_breaker_app(name)), name=name, route_prefix=f"/{name}")
    url = f"{serve_cluster}/{name}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=30).json()["models"]["k2"]["status"] == "HEALTHY":
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, "the second application did not come up"
            time.sleep(1)
        for _ in range(2):
            r = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                           json={"model": "k2", "messages": [{"role": "user", "content": "hello"}]})
            assert r.status_code == 502, r.text
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/health", timeout=30).json()["models"]["k2"]["breaker_state"] != "open":
            assert time.monotonic() < deadline, "the second application's breaker did not open"
            time.sleep(0.3)
        time.sleep(1.0)                       # several sync rounds of every registry
        other_k2 = httpx.get(f"{other.url}/health", timeout=30).json()["models"]["k2"]
        assert other_k2["breaker_state"] == "closed" and other_k2["breaker"]["consecutive_failures"] == 0
        assert _post(other, {"model": "k2", "messages": [{"role": "user", "content": "hello"}]}).status_code == 200

        mine = ray.get_actor(state_actor_name(name), namespace="horizon")
        theirs = ray.get_actor(state_actor_name(other.name), namespace="horizon")
        # The replicas push their outcomes on their sync interval: poll (2 loaded cores).
        deadline = time.monotonic() + 20
        while ray.get(mine.states.remote()).get("k2", {}).get("state") != "open":
            assert time.monotonic() < deadline, ray.get(mine.states.remote())
            time.sleep(0.5)
        assert ray.get(theirs.states.remote()).get("k2", {"state": "closed"})["state"] == "closed"
        assert ray.get(mine.settings.remote())["failure_threshold"] == 2
        assert ray.get(theirs.settings.remote())["failure_threshold"] == 5
        serve.delete(name)
        gone_by = time.monotonic() + CHECK_INTERVAL_S * (ABSENT_CHECKS + 1) + 30
        left = [state_actor_name(name)]
        while left:
            left = [actor for actor in left if _actor_alive(actor)]
            assert time.monotonic() < gone_by, f"still running after {name} was deleted: {left}"
            time.sleep(1)
        assert _actor_alive(state_actor_name(other.name)), f"the state actor ended though {other.name} still runs"
    finally:
        serve.delete(name)
        _kill_state_actor(name)


def test_the_registry_actor_answers_a_watching_replica_when_another_opens_a_breaker(serve_cluster):
    """The real state actor's registry (an asyncio actor, as Ray runs it): replica A, idle and watching,
    sees the breaker that replica B's pushed failures opened within one round trip, long before
    its next interval would have come."""
    import asyncio

    from serve_app.app_state import connect_application_state
    from serve_app.config.resilience import BreakerSettings
    from serve_app.resilience.breaker import CircuitBreaker
    from serve_app.resilience.breaker_ray import RayBreakerStore

    name = f"watch-{uuid.uuid4().hex[:6]}"
    settings = BreakerSettings(failure_threshold=3, sync_interval_s=5.0, watch_timeout_s=30.0)

    async def scenario() -> float:
        a = RayBreakerStore(connect_application_state(name), settings)
        b = RayBreakerStore(connect_application_state(name), settings)
        await a.sync_once()       # A holds the registry's current version...
        a.start()                 # ...so its first watch waits at the registry
        await asyncio.sleep(0.5)
        for _ in range(3):
            CircuitBreaker("k2", b).try_acquire().failure()
        pushed = time.monotonic()
        await b.sync_once()
        while CircuitBreaker("k2", a).state().state != "open":
            assert time.monotonic() - pushed < settings.sync_interval_s, "A did not see the open breaker"
            await asyncio.sleep(0.02)
        seen_after = time.monotonic() - pushed
        await a.aclose()
        await b.aclose()
        return seen_after

    try:
        seen_after = asyncio.run(scenario())
        # One round trip on two loaded cores, against the 5-s interval a poll would wait.
        assert seen_after < 1.5, seen_after
    finally:
        _kill_state_actor(name)


def test_a_restarted_state_actor_keeps_the_applications_breaker_settings(serve_cluster):
    """Ray restarts the state actor after a crash with its creating call's arguments: the
    application's breaker settings, not the defaults, and a new registry epoch."""
    import ray

    from serve_app.app_state import connect_application_state
    from serve_app.config.resilience import BreakerSettings

    name = f"restart-{uuid.uuid4().hex[:6]}"
    strict = BreakerSettings(failure_threshold=3).model_dump()
    try:
        actor = connect_application_state(name, strict)
        before = ray.get(actor.sync.remote([("k2", "failure", time.time())]), timeout=60)
        ray.kill(actor, no_restart=False)          # a crash: Ray restarts it (max_restarts=-1)
        # ray.kill is asynchronous: calls may still reach the old incarnation for a moment.
        deadline = time.monotonic() + 60
        after = before
        while after["epoch"] == before["epoch"]:
            assert time.monotonic() < deadline, "the state actor did not restart"
            try:
                after = ray.get(actor.sync.remote([]), timeout=10)
            except ray.exceptions.RayActorError:
                pass
            time.sleep(0.2)
        assert after["states"] == {}               # a new incarnation starts with no states
        assert ray.get(actor.settings.remote(), timeout=30)["failure_threshold"] == 3
    finally:
        _kill_state_actor(name)


def test_actors_an_earlier_version_left_are_retired_while_this_code_runs(two_ingress):
    """An in-place upgrade leaves the older code's actors running (their protocol is in their
    names, so no replica of this code calls them). The running application's state actor ends
    them, with the default check interval; another application's stay."""
    import ray

    @ray.remote
    class Leftover:  # stands for an older code's actor: only its name matters here
        def ping(self) -> str:
            return "pong"

    app = two_ingress.name
    mine = [f"horizon-breakers.v2:{app}", f"horizon-demand.v2:{app}", f"horizon-state.v1:{app}"]
    theirs = f"horizon-demand.v2:{app}-canary"
    # As the older code made them: detached, and restarted after a crash.
    handles = {name: Leftover.options(name=name, namespace="horizon", lifetime="detached", num_cpus=0,
                                      max_restarts=-1).remote() for name in (*mine, theirs)}
    try:
        # Each one started. The application's state actor checks every 15 s, so on a busy
        # machine it may end one of this application's stand-ins before it first answers
        # (failed once in CI): then Ray names ray.kill as the cause; nothing else kills them.
        for name, handle in handles.items():
            try:
                assert ray.get(handle.ping.remote(), timeout=60) == "pong"
            except ray.exceptions.RayActorError as exc:
                assert name in mine and "killed by `ray.kill`" in str(exc), (name, str(exc)[:300])
        gone_by = time.monotonic() + 2 * CHECK_INTERVAL_S + 30
        left = list(mine)
        while left:
            left = [name for name in left if _actor_alive(name)]
            assert time.monotonic() < gone_by, f"still running under {app}'s earlier names: {left}"
            time.sleep(1)
        assert _actor_alive(theirs), "another application's actor was ended"
        assert _actor_alive(state_actor_name(app)), "the application's own state actor was ended"
        # It still takes both replicas' reports (each every half second; poll: 2 loaded cores).
        actor = ray.get_actor(state_actor_name(app), namespace="horizon")
        deadline = time.monotonic() + 20
        while (snapshot := ray.get(actor.snapshot.remote(), timeout=30))["sources"] != 2:
            assert time.monotonic() < deadline, snapshot
            time.sleep(0.5)
    finally:
        for name in (*mine, theirs):
            _kill_actor(name)


def test_the_replicas_breaker_stores_follow_a_state_actor_made_again(two_ingress):
    """The state actor ends for good (its watch saw the application absent, or an operator
    killed it): the replicas' demand publishers make a new one, and their breaker stores get it
    again too, so the outcomes of the next requests reach the new registry."""
    import ray

    app = two_ingress.name
    old = ray.get_actor(state_actor_name(app), namespace="horizon")
    old_epoch = ray.get(old.sync.remote([]), timeout=30)["epoch"]
    ray.kill(old, no_restart=True)
    deadline = time.monotonic() + 60
    while True:                                  # a publisher makes it again within a report
        try:
            new = ray.get_actor(state_actor_name(app), namespace="horizon")
            reply = ray.get(new.sync.remote([]), timeout=10)
            if reply["epoch"] != old_epoch:
                break
        except (ValueError, ray.exceptions.RayActorError):
            pass
        assert time.monotonic() < deadline, "no new state actor"
        time.sleep(0.5)
    deadline = time.monotonic() + 30
    while "k2" not in ray.get(new.states.remote(), timeout=30):
        assert _post(two_ingress, {"model": "k2", "max_tokens": 4,
                                   "messages": [{"role": "user", "content": "hello"}]}).status_code == 200
        assert time.monotonic() < deadline, "no breaker store pushed to the new state actor"
        time.sleep(0.5)


def _kill_state_actor(app_name: str) -> None:
    """End ``app_name``'s state actor for good, if it is still there (a test's clean-up)."""
    _kill_actor(state_actor_name(app_name))


def _kill_actor(name: str) -> None:
    """End the actor ``name`` of namespace ``horizon`` for good, if it is still there."""
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace="horizon"), no_restart=True)
    except ValueError:
        pass


def _actor_alive(name: str) -> bool:
    import ray

    try:
        actor = ray.get_actor(name, namespace="horizon")
    except ValueError:
        return False
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return False
    return True
