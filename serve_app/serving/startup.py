"""Routing start-up: embed the intent templates through the embedding deployment, then route.

It runs in the background of the ingress replica (Serve must see the replica up so ``/health``
can say ``starting``). While the embedding deployment is not up yet, or answers too slowly, the
reason is kept for ``/health`` and the start is retried; any other failure is final and shown.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

from ..config.schema import HorizonConfig
from ..errors import ModelUnavailable, UpstreamTimeout
from ..fleet.protocol import EmbeddingClient, ModelClient
from ..routing.router import Router

log = logging.getLogger("ray.serve")

RETRY_S = 2.0


class RoutingStartup:
    def __init__(self, cfg: HorizonConfig, embedder: Optional[EmbeddingClient],
                 classifier: Optional[ModelClient], install: Callable[[Router], None]):
        self.cfg = cfg
        self.embedder = embedder
        self.classifier = classifier
        self.install = install
        self.error: Optional[str] = None
        self.ready = False

    async def run(self) -> None:
        while True:
            try:
                router = Router(self.cfg, self.embedder, self.classifier)
                await router.start()
            except (ModelUnavailable, UpstreamTimeout) as exc:
                self.error = f"routing waits for the embedding model: {exc.message}"
                await asyncio.sleep(RETRY_S)
                continue
            except Exception as exc:  # noqa: BLE001 — reported on /health, retried by redeploy
                self.error = f"{type(exc).__name__}: {exc}"
                log.exception("routing failed to start")
                return
            self.install(router)
            self.ready, self.error = True, None
            log.info("routing ready: %d decisions", len(self.cfg.routing.decisions))
            return

    def not_ready(self, retry_after_s: float) -> ModelUnavailable:
        why = self.error or "the router is still starting (waiting for the embedding model)"
        return ModelUnavailable(f"K2 Horizon is not ready: {why}", retry_after=retry_after_s)
