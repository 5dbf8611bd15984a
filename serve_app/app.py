"""The composition root: which deployments and which objects exist, and how they are wired.

``serve run configs/X.yaml`` calls :func:`build_app` with ``applications[0].args``. Each model
that owns an engine becomes its own deployment (``model-<alias>``), built by its backend with its
own placement, replicas and admission bounds; aliases that share an engine resolve to the
owner's handle. The ingress receives every handle and is the only HTTP-facing deployment.

Inside each ingress replica, :func:`compose_gateway` builds the objects one request meets: the
fleet over the handles, resilience around it, routing, Fusion, sessions, API keys, and the
gateway the HTTP layer calls. Tests call it with a fake base fleet.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Optional

from ray import serve
from ray.serve import Application

from deployments.gateway_demand import DemandPublisher

from serve_app.api.http import create_app
from serve_app.app_state import connect_application_state
from serve_app.autoscaling.options import scaling_options
from serve_app.capacity.planner import check_placement
from serve_app.config.live import live_config
from serve_app.config.loader import ConfigError, parse_config
from serve_app.config.models import ModelSettings
from serve_app.config.schema import HorizonConfig
from serve_app.auth.keys import ApiKeyAuthenticator
from serve_app.chat.pipeline import ChatService
from serve_app.fleet.availability import DeploymentBoard, read_serve_status
from serve_app.fleet.backends import backend
from serve_app.fleet.handles import HandleFleet
from serve_app.fleet.names import INGRESS_DEPLOYMENT, deployment_name
from serve_app.fleet.protocol import EmbeddingClient, Fleet
from serve_app.fusion.looper import FusionLooper
from serve_app.observability.logging import serve_logging_options
from serve_app.observability.replica_logs import start_replica_logging
from serve_app.observability.metrics import configure_metrics
from serve_app.resilience.breaker import BreakerStore
from serve_app.resilience.breaker_ray import RayBreakerStore
from serve_app.resilience.admission import line_per_replica
from serve_app.resilience.fallback import ResilientFleet
from serve_app.routing.router import Router
from serve_app.tools.serve_config import file_problems
from serve_app.serving.catalog import ModelCatalog
from serve_app.serving.embeddings import Embeddings
from serve_app.serving.gateway import Gateway
from serve_app.serving.process import freeze_startup_heap, tune_collector
from serve_app.serving.startup import RoutingStartup
from serve_app.sessions.store import SessionStore, build_session_store
from serve_app.sessions.stored_responses import build_response_store

__all__ = ["build_app", "build_graph", "build_model_node", "compose_gateway", "compose_routing",
           "deployment_name"]

log = logging.getLogger("ray.serve")


@serve.deployment(name=INGRESS_DEPLOYMENT)
@serve.ingress()
class HorizonIngress:
    """The only HTTP-facing deployment: composes this replica's gateway and serves the OpenAI
    HTTP app over it. Ray Serve's proxy (or HAProxy in the fast mode) accepts or generates
    ``X-Request-ID`` and returns it; the same id tags every Serve log line of the request,
    including lines logged by the model deployments it calls."""

    async def __init__(self, config: dict[str, Any], handles: dict[str, Any]):
        cfg = parse_config(config, source="ingress args")
        self._args = config
        # The live settings in effect (serve_app.config.live). Serve's first reconfigure, right
        # after this constructor, brings them too; read here, routing starts once, with them.
        self._overrides: Any = {}
        self._routing_wait_s = cfg.global_.server.routing_start_wait_s
        starting = _starting_user_config()
        if starting:
            try:
                cfg, self._overrides = live_config(config, starting, source="ingress user_config"), starting
            except ConfigError:
                pass  # the first reconfigure reports it (and /health shows it)
        start_replica_logging(cfg.observability, log_payloads=cfg.global_.server.log_payloads)
        configure_metrics(cfg.observability)
        self.gateway = compose_gateway(cfg, handles=handles, app_name=_app_name())
        # Deployment states and routing start in the background (async __init__: on the
        # replica's own event loop), so /health can say "starting" instead of the replica hanging.
        self.gateway.start()
        server = cfg.global_.server
        # Serve puts the replica in rotation when this returns. Beside running replicas (a
        # redeploy, a scale-out) routing starts in well under a second: wait for it, so this
        # replica never answers "not ready" to requests the others would have served. On a
        # first start the wait is bounded, and /health says what routing waits for.
        await self.gateway.routing_started(server.routing_start_wait_s)
        self.gateway.join_roll_call()
        tune_collector(server.gc_gen0_threshold)
        if server.gc_freeze_after_start:
            self._freeze = asyncio.get_running_loop().create_task(self._freeze_when_routing_ready())

    async def reconfigure(self, user_config: Any) -> None:
        """Serve calls this with the deployment's ``user_config``: live routing settings
        (serve_app.config.live), applied without restarting anything. On a replica's start
        (before it takes requests) and on each change. Invalid settings never raise here: Serve
        would stop the running replicas for it. They are logged and shown on ``/health``, and the
        previous settings stay; ``horizon validate`` and ``horizon serve`` refuse them up front."""
        overrides = {} if user_config is None else user_config
        failed = self.gateway.update is not None and self.gateway.update.failed
        if overrides == self._overrides and not failed:
            return
        source = f"{INGRESS_DEPLOYMENT} user_config"
        try:
            cfg = live_config(self._args, overrides, source=source)
        except ConfigError as exc:
            log.error("%s", exc)
            self.gateway.reject_update(str(exc))
            return
        self._overrides = overrides
        await self.gateway.reconfigure(cfg, self._routing_wait_s)

    async def _freeze_when_routing_ready(self) -> None:
        """The replica's heap is built once routing has started (serve_app.serving.process)."""
        await self.gateway.routing_started()
        if self.gateway.ready:
            freeze_startup_heap()

    def __serve_build_asgi_app__(self):
        return create_app(self.gateway)


def _app_name() -> Optional[str]:
    try:
        return serve.get_replica_context().app_name
    except Exception:  # noqa: BLE001 — outside a replica: every application
        return None


def _starting_user_config() -> Any:
    """The ``user_config`` this replica starts with. Serve hands it to ``reconfigure`` only after
    the constructor; it is also in Serve's replica context (a private field). None where it is
    not: then the first reconfigure applies it, and routing starts twice."""
    try:
        return serve.get_replica_context()._deployment_config.user_config
    except Exception:  # noqa: BLE001 — outside a replica, or Ray moved it
        return None


def _replica_id() -> Optional[str]:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 — outside a replica: a random id
        return None


def build_model_node(model: ModelSettings, cfg: HorizonConfig) -> Application:
    """The deployment of one model that owns its engine, built by its backend."""
    options = {**scaling_options(model, line_per_replica(cfg, model.alias)),
               **serve_logging_options(cfg.observability)}
    return backend(model.backend).build(model, cfg, deployment_name(model.alias), options)


def build_graph(cfg: HorizonConfig, raw_args: dict[str, Any]) -> Application:
    handles = {m.alias: build_model_node(m, cfg) for m in cfg.models if m.shares_engine_with is None}
    server = cfg.global_.server
    ingress_options: dict[str, Any] = {"max_ongoing_requests": server.max_ongoing_requests,
                                       # Live settings (serve_app.config.live): none here, so an
                                       # operator's ``user_config`` override, once removed, is
                                       # reconfigured back to the profile's own.
                                       "user_config": {},
                                       "max_surge_percent": server.max_surge_percent,
                                       "ray_actor_options": {"num_cpus": 0},
                                       **serve_logging_options(cfg.observability)}
    if server.max_replicas > server.min_replicas:
        ingress_options["autoscaling_config"] = {"min_replicas": server.min_replicas,
                                                 "max_replicas": server.max_replicas,
                                                 "target_ongoing_requests": max(1, server.max_ongoing_requests // 2)}
    else:
        ingress_options["num_replicas"] = server.min_replicas
    return HorizonIngress.options(**ingress_options).bind(raw_args, handles)


def build_app(args: dict[str, Any]) -> Application:
    """Ray Serve application builder (``import_path: serve_app.app:build_app``)."""
    raw = dict(args)
    cfg = parse_config(raw, source="serve application args")
    # An impossible placement (say k2 TP8 on a 4-GPU node) fails here, before anything deploys.
    check_placement(cfg)
    # So do the files and engine settings its deployments would fail on at start.
    problems = file_problems(cfg)
    if problems:
        raise ConfigError("serve application args", problems)
    return build_graph(cfg, raw)


def compose_gateway(cfg: HorizonConfig, *, handles: Optional[dict[str, Any]] = None,
                    base_fleet: Optional[Fleet] = None, board: Optional[DeploymentBoard] = None,
                    breaker_store: Optional[BreakerStore] = None, app_name: Optional[str] = None,
                    sessions: Optional[SessionStore] = None) -> Gateway:
    """One ingress replica's objects. With ``handles`` (in a Serve replica): clients over the
    deployments, deployment states from Serve's controller, breaker state in the cluster-wide
    actor. With ``base_fleet`` (tests): that fleet, and in-process stores."""
    if board is None:
        board = DeploymentBoard(functools.partial(read_serve_status, app_name) if handles is not None
                                else dict, retry_after_s=max(1, cfg.global_.server.retry_after_s))
    if base_fleet is None:
        assert handles is not None, "compose_gateway needs the deployment handles or a fleet"
        base_fleet = HandleFleet(cfg, handles, board=board)
    # The application's state actor (serve_app.app_state): breakers and demand, one process.
    state = functools.partial(connect_application_state, app_name, cfg.resilience.breaker.model_dump())
    if breaker_store is None and handles is not None:
        # Breaker state shared by this application's ingress replicas.
        breaker_store = RayBreakerStore(state(), cfg.resilience.breaker, connect=state)
    fleet = ResilientFleet(base_fleet, cfg, breaker_store=breaker_store)
    # Each admission line follows its model's running replicas (and the ingress's own).
    board.subscribe(fleet.follow_replicas)
    # A backlog on a model that can scale out means new replicas are likely coming: the board
    # then watches at its fast cadence (a fixed-size model's backlog changes nothing there).
    board.watch_backlog(lambda: fleet.waits_on_scale_out(board.states))
    # What waits in those lines reaches each model's autoscaler (deployments.gateway_demand).
    replica = _replica_id() if handles is not None else None
    publisher = DemandPublisher(fleet.waiting_by_deployment, state,
                                source=replica) if handles is not None else None
    if sessions is None and cfg.sessions.enabled:
        sessions = build_session_store(cfg.sessions)
    recompose = functools.partial(compose_routing, fleet=fleet, embedder=base_fleet.embedder,
                                  sessions=sessions)
    service, startup = recompose(cfg)
    auth = ApiKeyAuthenticator(cfg.auth)
    return Gateway(cfg=cfg, fleet=fleet, service=service, auth=auth, board=board,
                   catalog=ModelCatalog(cfg, created=int(time.time())),
                   embeddings=Embeddings(cfg, base_fleet.embedder, auth), startup=startup,
                   demand=publisher, replica=replica, recompose=recompose,
                   response_store=build_response_store(cfg.sessions),
                   conversation_store=build_response_store(cfg.sessions, conversations=True))


def compose_routing(cfg: HorizonConfig, *, fleet: ResilientFleet, embedder: Optional[EmbeddingClient],
                    sessions: Optional[SessionStore]) -> tuple[ChatService, RoutingStartup]:
    """The part of a gateway its live settings (``routing``) shape: the chat service, and the
    routing start that installs its router. The fleet, sessions and the rest are kept."""
    service = ChatService(cfg, fleet, router=None, fusion=FusionLooper(fleet), sessions=sessions)
    classifier_alias = cfg.routing.signals.intent.classifier.model
    classifier = fleet.client(classifier_alias, task_type="unknown") \
        if cfg.routing.signals.intent.classifier.enabled and classifier_alias in cfg.aliases else None

    def install(router: Router) -> None:
        service.router = router

    return service, RoutingStartup(cfg, embedder, classifier, install)
