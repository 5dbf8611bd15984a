"""``horizon serve [CONFIG]``: start a profile on this machine and watch it come up.

What it does, in order, so that a first run either works or says at once why not:

1. Load the profile (an invalid key fails here, naming it, as does a key of the Serve config
   around it that Serve would ignore or apply against the profile: :mod:`.serve_config`).
2. Refuse, changing nothing, when the profile's HTTP port is taken or a Ray cluster is already
   running here (``--address`` deploys into a running cluster instead, next to its applications).
3. Check that every deployment's initial replicas fit what Ray will detect on this machine
   (:mod:`serve_app.capacity.machine`), naming the one that would stay pending.
4. Start Ray (Serve's fast mode, ``RAY_SERVE_THROUGHPUT_OPTIMIZED`` and ``RAY_SERVE_ENABLE_HA_PROXY``,
   must be in the environment before Ray starts), then hand the profile to Serve's controller
   as the Serve config it is, without waiting (:func:`deploy_schema`: the controller builds the
   application in a task of its own, so this process never imports vLLM, and a later
   ``serve deploy`` of the unchanged file restarts nothing).
5. Print each deployment's state as it changes, with the reason Serve gives (a replica that
   cannot be scheduled, a failing constructor), and the gateway's ``/health`` until it is ready;
   stop (step 6) when Ray's GCS stops answering.
6. On Ctrl-C or SIGTERM: stop the Ray it started (its own processes, never another cluster, in
   ``ray stop``'s order) and Ray's HAProxy, and wait until the port is free; on a cluster it
   joined, or one that nodes of other machines joined, delete the application first
   (:func:`shutdown`).

Plain ``serve run configs/X.yaml`` deploys the same config, in Serve's default mode unless
those two variables are exported; it does none of the checks above.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Optional
from urllib.parse import urlparse

import ray
from ray import serve
from ray.serve._private import api as serve_api
from ray.serve.config import gRPCOptions
from ray.serve.schema import APIType, ServeApplicationSchema, ServeDeploySchema, ServeInstanceDetails

from serve_app.capacity.machine import check_machine
from serve_app.config.loader import (DEFAULT_HOST, DEFAULT_PORT, DEFAULT_ROUTE_PREFIX, ConfigError, parse_config,
                                     read_document, serve_http)
from serve_app.fleet.backends import backend
from serve_app.redis_client import redact_url

from . import local_cluster as lc
from ..config.arguments import positive_number
from .serve_config import check_serve_config
from .progress import app_status, changes, elapsed_prefix, health_summary, snapshot

# Port of Ray's metrics agent on this node (Prometheus text); the gateway's /metrics proxies it.
DEFAULT_METRICS_PORT = 8080


def serve_env(base: Optional[dict[str, str]] = None, fast: bool = True) -> dict[str, str]:
    """The environment of the Ray processes ``horizon serve`` starts (``base``: os.environ)."""
    return dict(lc.apply_serve_env(dict(os.environ if base is None else base), fast=fast))


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", default="configs/local.yaml", help="profile YAML")
    parser.add_argument("--no-fast", action="store_true", help="use Ray Serve's default proxy mode")
    parser.add_argument("--address", default=None,
                        help="deploy into this running Ray cluster (e.g. auto) instead of starting one")
    parser.add_argument("--ready-timeout", type=positive_number, default=900.0, metavar="S",
                        help="give up (and stop) when not ready after S seconds (default 900)")
    parser.add_argument("--non-blocking", action="store_true",
                        help="return once the gateway is ready, leaving it running (stop: horizon stop)")
    parser.add_argument("--verbose", action="store_true", help="also stream Ray's worker logs")
    parser.add_argument("--dashboard", action="store_true",
                        help="also start Ray's dashboard on 127.0.0.1 (what `serve status`, `serve deploy` "
                             "and the web UI talk to; about 200 MB more)")
    parser.set_defaults(func=run)


def say(message: str) -> None:
    print(f"horizon: {message}", flush=True)


class _Stop(BaseException):
    """SIGINT or SIGTERM: the clean shutdown. A BaseException, like KeyboardInterrupt: the
    signal may land inside any call (``serve.status()`` in the progress loop), and an
    ``except Exception`` there must not swallow it (found: Ctrl-C during that call was caught as
    the controller "not answering", whose empty message then failed the command)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Stop()


# The application builder every profile names (``applications[0].import_path``).
APP_IMPORT_PATH = "serve_app.app:build_app"


def serve_document(document: dict[str, Any]) -> dict[str, Any]:
    """The profile as the Serve config this command deploys, with its defaults filled in where
    the file is silent: loopback on port 8000, one application named ``horizon`` at ``/``. (A
    bare args mapping, as unit-test fixtures write profiles, becomes that application's args.)"""
    serve_http(document)  # one application, a host, port and prefix Serve can use; else ConfigError
    doc = copy.deepcopy(dict(document))
    if "applications" not in doc:
        doc = {"applications": [{"args": doc}]}
    app = doc["applications"][0]
    app.setdefault("name", "horizon")
    app.setdefault("route_prefix", DEFAULT_ROUTE_PREFIX)
    app.setdefault("import_path", APP_IMPORT_PATH)
    http = doc.get("http_options") or {}
    http.setdefault("host", DEFAULT_HOST)
    http.setdefault("port", DEFAULT_PORT)
    doc["http_options"] = http
    doc.setdefault("proxy_location", "EveryNode")
    return doc


def _http_settings(document: dict[str, Any]) -> tuple[str, int, str, str]:
    """Host, port, route prefix and application name of a :func:`serve_document`."""
    http, app = document["http_options"], document["applications"][0]
    return str(http["host"]), int(http["port"]), str(app["route_prefix"]), str(app["name"])


def get_health(url: str) -> Optional[dict[str, Any]]:
    """The gateway's ``/health`` body (a 503 while it starts carries one too); None when nothing
    answers or something else does: HAProxy's 404 before the application is deployed."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and "status" in body else None


def _preflight(args: argparse.Namespace, cfg: Any, host: str, port: int) -> Optional[str]:
    """Why this command must not start, or None."""
    if args.address is not None:
        if args.dashboard:
            return (f"--dashboard starts a dashboard with the Ray this command starts; the cluster at "
                    f"{args.address} has its own (or none) and is left as it is")
        return None
    existing = lc.running_ray_address()
    if existing:
        mine = lc.ServeState.load()
        # horizon serve's own cluster: still served (--non-blocking records no pid), or left
        # behind by a horizon serve that was killed; `horizon stop` stops it and nothing else.
        ours = mine is not None and mine.owns_cluster and (
            lc.pid_alive(mine.pid) or lc.gcs_port_of(mine.gcs_address) == lc.gcs_port_of(existing))
        hint = ("`horizon stop` stops it" if ours
                else "stop it with `ray stop`, or deploy into it with --address auto")
        return (f"a Ray cluster is already running on this machine ({existing}); horizon serve starts "
                f"its own and touches no other: {hint}")
    if lc.port_in_use(host, port):
        owner = lc.port_owner(port)
        return (f"port {port} on {host} is already in use{' by ' + owner if owner else ''}; stop that "
                f"process or change http_options.port in {args.config}")
    fit = check_machine(cfg)
    if fit.errors:
        elsewhere = "" if cfg.cluster is None else (
            f". It is planned for cluster {cfg.cluster.name!r} (node types "
            f"{', '.join(n.name for n in cfg.cluster.node_types)}), and this command starts Ray on this "
            f"machine alone: deploy it into that cluster instead (`horizon serve {args.config} --address "
            f"auto` on its head node, `serve run {args.config}` there, or its KubeRay manifest; "
            f"docs/fleet.md)")
        return (f"{args.config} cannot be scheduled on this machine ({fit.machine.describe()}): "
                + "; ".join(str(e) for e in fit.errors) + elsewhere)
    for warning in fit.warnings:
        say(f"note: {warning}")
    say(fit.summary())
    for note in redis_notes(cfg):
        say(f"note: {note}")
    return None


def redis_notes(cfg: Any) -> list[str]:
    """A line for each Redis the profile uses that does not answer now. Not a refusal: the
    gateway starts and answers without it (docs/sessions.md), but the operator should know."""
    users: dict[str, list[str]] = {}
    if cfg.sessions.enabled and cfg.sessions.backend == "redis":
        users.setdefault(cfg.sessions.redis_url, []).append("sessions")
    if cfg.auth.enabled and cfg.auth.rate_limit_store == "redis" and any(
            k.requests_per_minute is not None for k in cfg.auth.keys):
        users.setdefault(cfg.auth.redis_url or cfg.sessions.redis_url, []).append("rate limits")
    notes = []
    for url, what in users.items():
        parsed = urlparse(url)
        if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
            continue
        try:
            socket.create_connection((parsed.hostname, parsed.port or 6379), timeout=1.0).close()
        except OSError as exc:
            local = parsed.hostname in ("127.0.0.1", "localhost", "::1")
            hint = f"; start one: bash scripts/redis.sh start {parsed.port or 6379}" if local else ""
            notes.append(f"Redis at {redact_url(url)} ({' and '.join(what)}) does not answer ({exc.strerror or exc}): "
                         f"the gateway answers without it (no history, limits per replica) and /health says "
                         f"so until it does{hint}")
    return notes


def _ray_bin() -> str:
    return shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")


def _cluster_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of the Ray processes this command starts (every replica inherits it)."""
    env = serve_env(fast=not args.no_fast)
    if args.address is None:
        if "RAY_AUTH_MODE" not in env:
            # The cluster this command starts uses Ray's token authentication (the default of a
            # new local Ray); `ray start` and every later connection read the same token file.
            env["RAY_AUTH_MODE"] = "token"
        for key, default in lc.HAPROXY_PORT_ENV.items():
            if key not in env and lc.port_in_use("0.0.0.0", default):
                env[key] = str(lc.free_port())
    return env


def ray_start_command(gcs_port: int, metrics_port: int, dashboard_port: Optional[int],
                      log_monitor: bool) -> list[str]:
    """``ray start --head`` as ``horizon serve`` runs it; ``dashboard_port`` None: no dashboard."""
    cmd = [_ray_bin(), "start", "--head", f"--port={gcs_port}",
           f"--metrics-export-port={metrics_port}", "--disable-usage-stats"]
    if dashboard_port is None:
        # Off unless asked for: its head modules are ≈ 200 MB of PSS and about 1 % of a core
        # idle on two cores, and `horizon status` reads the same state through the GCS.
        cmd.append("--include-dashboard=false")
    else:
        cmd += ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
    if not log_monitor:
        # The log monitor only streams the processes' logs to a driver (--verbose); they
        # are written to the session's log files either way (≈ 80 MB resident saved).
        cmd.append("--include-log-monitor=false")
    return cmd


def _start_ray(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Start a Ray head on this machine (or connect to ``--address``) and connect to it.

    The head is started with ``ray start`` rather than by this process, so that it can outlive
    it (``--non-blocking``) and ``horizon status`` / ``horizon stop`` can reach it; resources are
    Ray's own detection, and ``env`` reaches every Ray process through the raylet.
    """
    if args.address is None:
        if env.get("RAY_AUTH_MODE") == "token" and not lc.token_available():
            subprocess.run([_ray_bin(), "get-auth-token", "--generate"], capture_output=True,
                           env=env, timeout=60)
        metrics_port = DEFAULT_METRICS_PORT if not lc.port_in_use("0.0.0.0", DEFAULT_METRICS_PORT) \
            else lc.free_port()
        gcs_port = 6379 if not lc.port_in_use("0.0.0.0", 6379) else lc.free_port()
        dashboard_port = None
        if args.dashboard:
            # Ray's default port when it is free, so that `serve status` finds it unaided.
            dashboard_port = lc.DEFAULT_DASHBOARD_PORT \
                if not lc.port_in_use("0.0.0.0", lc.DEFAULT_DASHBOARD_PORT) else lc.free_port()
        cmd = ray_start_command(gcs_port, metrics_port, dashboard_port, log_monitor=args.verbose)
        dashboard_url = f"http://127.0.0.1:{dashboard_port}" if dashboard_port else ""
        global _started_gcs_port
        _started_gcs_port = gcs_port
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout)[-2000:]}")
        address = f"127.0.0.1:{gcs_port}"
    else:
        address, dashboard_url = args.address, ""
    os.environ["RAY_AUTH_MODE"] = env.get("RAY_AUTH_MODE", os.environ.get("RAY_AUTH_MODE", ""))
    if not os.environ["RAY_AUTH_MODE"]:
        del os.environ["RAY_AUTH_MODE"]
    lc.use_cluster_token()
    ctx = ray.init(address=address, namespace="serve", log_to_driver=args.verbose,
                   logging_level="WARNING")
    return {"gcs_address": ctx.address_info.get("gcs_address", address),
            "node_id": ray.get_runtime_context().get_node_id(),
            "session_dir": ctx.address_info.get("session_dir", ""),
            "dashboard_url": dashboard_url}


# The GCS port of the head this process started (known before the session is: a start that
# fails half-way must still stop exactly what it started).
_started_gcs_port: Optional[int] = None


def stop_ray(session_dir: str = "", gcs_address: str = "", gcs_alive: bool = True) -> None:
    """Stop the Ray cluster this command started, and only it (never `ray stop`, which stops
    every cluster of the user on the machine), and forget its address as `ray stop` would.
    ``gcs_alive`` false: its GCS is gone (:func:`lc.stop_cluster`)."""
    lc.stop_cluster(lc.cluster_pids(session_dir, _started_gcs_port), gcs_alive=gcs_alive)
    lc.forget_cluster_address(_started_gcs_port or lc.gcs_port_of(gcs_address))


def deploy_schema(document: dict[str, Any], others: list[ServeApplicationSchema],
                  target_capacity: Optional[float] = None) -> ServeDeploySchema:
    """What this command asks Serve's controller to apply: the profile as the Serve config it
    is, exactly what ``serve deploy FILE`` sends. Serve versions a config's deployments by a hash
    of the application's import path, args and runtime env, so a later ``serve deploy`` of the
    unchanged file restarts nothing, and its ``deployments:`` overrides apply as they would with
    ``serve run``. (Deployed through ``serve.run`` instead, every deployment had a version of its
    own, and that first ``serve deploy`` restarted all of them, each vLLM engine reloading.)
    ``others``: the applications the cluster already runs from a config, kept beside this one,
    since Serve's config deploy is declarative and would delete an application left out; and
    the cluster's ``target_capacity``, which a config deploy also sets, unless the file does."""
    schema = ServeDeploySchema.model_validate(document)
    mine = {app.name for app in schema.applications}
    kept = [app for app in others if app.name not in mine]
    if kept:
        schema.applications = kept + list(schema.applications)
    if "target_capacity" not in document and target_capacity is not None:
        schema.target_capacity = target_capacity
    return schema


def _deploy(document: dict[str, Any]) -> None:
    """Start Serve (its proxies as the profile says) and hand the profile to the controller,
    which builds the application in a task of its own; this process never imports vLLM."""
    schema = ServeDeploySchema.model_validate(document)
    # Serve's own CLI (`serve run`) starts Serve this way from a config.
    client = serve_api.serve_start(
        http_options=schema.http_options.model_dump(), proxy_location=schema.proxy_location,
        grpc_options=gRPCOptions(**schema.grpc_options.model_dump()),
        controller_options=schema.controller_options)
    # Not waiting for RUNNING: the progress loop below reports each deployment as it comes up.
    deploy_beside_others(client, document)


def deploy_beside_others(client: Any, document: dict[str, Any]) -> None:
    """Hand ``document`` to Serve's controller (``client``), keeping beside it the applications
    the cluster already runs from a config (:func:`deploy_schema`); returns once it is accepted."""
    details = ServeInstanceDetails(**client.get_serve_details())
    others = [app.deployed_app_config for app in details.applications.values()
              if app.source == APIType.DECLARATIVE and app.deployed_app_config is not None]
    client.deploy_apps(deploy_schema(document, others, details.target_capacity))


def _watch(state: lc.ServeState, started: float, ready_timeout: float, non_blocking: bool) -> int:
    """Print progress until ready (then keep printing changes) or until a hopeless failure."""
    seen: dict[str, Any] = {}
    last_health = ""
    ready_at: Optional[float] = None
    failures = 0
    while True:
        now = time.monotonic() - started
        if not lc.answers(state.gcs_address):
            # Ray's core ends a driver a minute after its GCS went away, which would leave every
            # replica running; stopping now (the caller's shutdown) stops them.
            say(f"Ray's GCS at {state.gcs_address} stopped answering (its log: "
                f"{state.session_dir or '<session>'}/logs/gcs_server.out); stopping")
            return 1
        try:
            status = serve.status()
            failures = 0
        except Exception as exc:  # noqa: BLE001 — the controller can be slow to answer at start
            status = None
            failures += 1
            if failures == 1:
                say(f"Serve's controller did not answer: {(str(exc).splitlines() or [type(exc).__name__])[0]}")
            if failures >= 30:
                say("Serve's controller has not answered for 30 s; giving up")
                return 1
        if status is not None:
            views = snapshot(status, state.app_name)
            for line in changes(seen, views):
                print(f"{elapsed_prefix(now)} {line}", flush=True)
            seen = views
            app_state, app_message = app_status(status, state.app_name)
            if app_state == "DEPLOY_FAILED":
                say(f"application {state.app_name!r} failed to deploy: {app_message}")
                return 1
        if ready_at is None:
            body = get_health(state.base_url)
            if body is not None:
                line = health_summary(body)
                if line != last_health:
                    print(f"{elapsed_prefix(now)} {line}", flush=True)
                    last_health = line
                if body.get("status") in ("ready", "degraded"):
                    ready_at = now
                    say(f"ready in {now:.0f} s: {state.base_url}  (OpenAI base_url {state.base_url}/v1; "
                        f"status: horizon status; stop: Ctrl-C or horizon stop)")
                    if state.dashboard_url:
                        say(state.dashboard_line() or "")
                    if non_blocking:
                        return 0
            if now > ready_timeout:
                say(f"not ready after {ready_timeout:.0f} s; stopping (see the lines above for why)")
                return 1
        time.sleep(1.0 if ready_at is None else 5.0)


def shutdown(state: lc.ServeState) -> None:
    """When this command started Ray, stop Ray and its HAProxy; on a cluster it joined, delete
    the application."""
    say("stopping ...")
    started = time.monotonic()
    # On a cluster of this machine alone that this command started, not deleting the
    # application first: in the fast mode Serve keeps a deleted ingress replica answering for
    # RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S (30 s) so that an external load balancer
    # can take it out of rotation. Here the only one is the HAProxy stopped below, so Ctrl-C
    # waited half a minute for nothing. Every process of the cluster gets SIGTERM instead: the
    # replicas end, each vLLM engine core with them. Replicas on nodes that joined from other
    # machines are not this machine's processes: Serve stops those.
    # A cluster that does not answer (its GCS died) is asked nothing more: each call would fail
    # only after Ray's own connection timeout.
    connected = _connected(state)
    if connected and (not state.owns_cluster or _joined_by_other_nodes(state)):
        delete_application(state)
    disconnect: Optional[threading.Thread] = None
    if connected:
        ray.shutdown()
    else:
        # A driver whose GCS is gone takes Ray's 5-s timeout to disconnect (measured): beside
        # the stop, not before it.
        disconnect = threading.Thread(target=ray.shutdown, name="ray-shutdown", daemon=True)
        disconnect.start()
    if state.owns_cluster:
        stop_ray(state.session_dir, state.gcs_address, gcs_alive=connected)
        lc.stop_processes(lc.haproxy_pids(state.node_id or None))
        lc.remove_haproxy_files(state.node_id, base=state.haproxy_dir or None)
        if not lc.wait_port_free(state.host, state.port, 30):
            say(f"port {state.port} is still in use by {lc.port_owner(state.port) or 'another process'}")
    if disconnect is not None:
        disconnect.join(timeout=15)
    lc.ServeState.clear()
    say(f"stopped in {time.monotonic() - started:.0f} s")


def _connected(state: lc.ServeState) -> bool:
    """Connect to the cluster the application runs on; False (and why, said) when it does not
    answer."""
    # Ray's own calls to a GCS that is gone wait for it: a connect retries for minutes, and a
    # connected driver (Ctrl-C of `horizon serve`) blocks until Ray's core ends the process a
    # minute later, leaving every replica running. A plain TCP connect to its port first.
    if not lc.answers(state.gcs_address):
        say(f"the cluster at {state.gcs_address} does not answer (nothing listens there)")
        return False
    if ray.is_initialized():
        return True
    try:
        lc.use_cluster_token()
        ray.init(address=state.gcs_address, namespace="serve", log_to_driver=False,
                 logging_level="ERROR")
        return True
    except Exception as exc:  # noqa: BLE001 — stopping continues without the cluster's answers
        say(f"the cluster at {state.gcs_address} does not answer ({exc})")
        return False


def _joined_by_other_nodes(state: lc.ServeState) -> bool:
    """Whether a live node other than this command's own is in the (connected) cluster
    (unknown: yes)."""
    try:
        return any(node["Alive"] and node["NodeID"] != state.node_id for node in ray.nodes())
    except Exception:  # noqa: BLE001 — unknown: take the path that stops every replica
        return True


def delete_application(state: lc.ServeState) -> None:
    """Delete the application from the (connected) cluster it runs on; its replicas stop
    gracefully (the engines abort what they run)."""
    try:
        # (Serve's own INFO line about it would land on the console after "stopped".)
        logging.getLogger("ray.serve").setLevel(logging.WARNING)
        serve.delete(state.app_name)
    except Exception as exc:  # noqa: BLE001 — stopping continues whatever Serve says
        say(f"serve shutdown: {exc}")


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        document = serve_document(read_document(args.config))
        cfg = parse_config(document, source=args.config)
        check_serve_config(document, cfg, args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    host, port, route_prefix, app_name = _http_settings(document)
    problem = _preflight(args, cfg, host, port)
    if problem:
        print(f"horizon serve: {problem}", file=sys.stderr)
        return 1
    env = _cluster_env(args)
    # The cluster this command starts runs HAProxy with these paths (one joined has its own).
    problems = (lc.haproxy_socket_problems(env)
                if args.address is None and env.get("RAY_SERVE_ENABLE_HA_PROXY") == "1" else [])
    if problems:
        print("horizon serve: " + "; ".join(problems), file=sys.stderr)
        return 1
    for model in cfg.models:
        if not model.shares_engine_with:
            backend(model.backend).prepare(model)

    # This process only builds the application: keep vLLM's and Serve's info lines off the
    # console (the cluster's processes got their environment above, before this).
    os.environ.update({k: v for k, v in env.items() if k not in os.environ})
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # Ctrl-C and SIGTERM both end in the clean shutdown below (installed explicitly: a process
    # started in the background by a script inherits SIGINT ignored).
    previous = {sig: signal.signal(sig, _on_sigterm) for sig in (signal.SIGINT, signal.SIGTERM)}
    state: Optional[lc.ServeState] = None
    code = 1
    try:
        say("starting Ray" if args.address is None else f"connecting to Ray at {args.address}")
        info = _start_ray(args, env)
        for name in ("ray", "ray.serve", "ray.llm"):
            logging.getLogger(name).setLevel(logging.WARNING)
        state = lc.ServeState(pid=0 if args.non_blocking else os.getpid(), config=str(args.config),
                              host=host, port=port, route_prefix=route_prefix, app_name=app_name,
                              owns_cluster=args.address is None,
                              token_auth=env.get("RAY_AUTH_MODE") == "token",
                              haproxy_dir=env.get("RAY_SERVE_HAPROXY_SERVER_STATE_BASE", ""), **info)
        state.save()
        say(f"Ray up in {time.monotonic() - started:.0f} s; logs: {state.session_dir or '?'}/logs "
            f"(Serve's under logs/serve)")
        say(f"deploying {app_name!r} from {args.config} on {state.base_url}")
        _deploy(document)
        code = _watch(state, started, args.ready_timeout, args.non_blocking)
    except (KeyboardInterrupt, _Stop):
        code = 0
    except Exception as exc:  # noqa: BLE001 — a failed start still stops what was started
        say(f"failed: {type(exc).__name__}: {exc}")
        code = 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if state is None:
            if args.address is None:
                stop_ray()
        elif code == 0 and args.non_blocking:
            # Left running for `horizon status` / `horizon stop`; this process only disconnects.
            ray.shutdown()
        else:
            shutdown(state)
    return code
