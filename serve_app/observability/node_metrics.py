"""The Prometheus text of this node's Ray metrics agent, for the gateway's ``GET /metrics``.

Every series Horizon records (``ray.serve.metrics``), and Serve's, vLLM's and Ray's own, are
exported by the Ray metrics agent of the node that recorded them, on that node's
``MetricsExportPort``. Serving this node's text on the gateway gives a one-machine deployment a
scrape target where users look for one; a cluster should scrape every node's agent (see
docs/observability.md).
"""

from __future__ import annotations

import asyncio
import urllib.request

import ray

from serve_app.errors import ModelUnavailable

def _metrics_address() -> tuple[str, int]:
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return node.get("NodeManagerAddress") or "127.0.0.1", int(node["MetricsExportPort"])
    raise LookupError("this node is not in ray.nodes()")


def _fetch(timeout_s: float) -> str:
    host, port = _metrics_address()
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as response:
        return response.read().decode("utf-8", "replace")


async def fetch_node_metrics(timeout_s: float = 5.0) -> str:
    try:
        return await asyncio.to_thread(_fetch, timeout_s)
    except Exception as exc:  # noqa: BLE001 — say what is missing, as an OpenAI-style 503
        raise ModelUnavailable(f"the Ray metrics agent of this node did not answer: {exc}",
                               code="metrics_unavailable", retry_after=5) from None
