"""Start-up progress lines: what changed, with Serve's reason, and the gateway's state."""

from types import SimpleNamespace

from serve_app.tools.progress import DeploymentView, changes, health_summary, ingress_summary, snapshot


def status(**deployments):
    deps = {name: SimpleNamespace(status=SimpleNamespace(value=st), message=msg,
                                  replica_states={f"ReplicaState.{k}": v for k, v in states.items()})
            for name, (st, states, msg) in deployments.items()}
    return SimpleNamespace(applications={"horizon": SimpleNamespace(deployments=deps)})


def test_snapshot_counts_running_and_starting_replicas():
    views = snapshot(status(**{"model-k2": ("UPDATING", {"RUNNING": 1, "STARTING": 2}, "")}), "horizon")
    assert views["model-k2"] == DeploymentView("model-k2", "UPDATING", 1, 2, "")
    assert snapshot(status(), "other") == {}


def test_only_new_or_changed_deployments_are_printed_with_servess_reason():
    before = snapshot(status(**{"ingress": ("HEALTHY", {"RUNNING": 1}, ""),
                                "model-k2": ("UPDATING", {"STARTING": 1}, "")}), "horizon")
    reason = "has 1 replicas that have taken more than 30s to be scheduled.\n Resources required: {'CPU': 2.0}"
    after = snapshot(status(**{"ingress": ("HEALTHY", {"RUNNING": 1}, ""),
                               "model-k2": ("UPDATING", {"STARTING": 1}, reason)}), "horizon")
    [line] = changes(before, after)
    assert line.startswith("model-k2") and "UPDATING" in line
    assert "taken more than 30s to be scheduled. Resources required: {'CPU': 2.0}" in line
    assert changes(after, after) == []


def test_health_summary_names_what_the_gateway_waits_for():
    body = {"status": "starting", "error": "routing waits for the embedding model",
            "waiting_for": ["model-bge-m3", "model-k2"], "models": {}}
    assert health_summary(body) == ("gateway starting — routing waits for the embedding model — "
                                    "waiting for model-bge-m3, model-k2")
    degraded = {"status": "degraded", "models": {"k2": {"status": "UNHEALTHY", "deployment": "k2"},
                                                  "minicpm-v": {"status": "NOT_SERVED"}}}
    assert health_summary(degraded) == "gateway degraded — not healthy: k2"


def test_health_summary_names_an_unreachable_shared_state_store():
    """`horizon serve configs/sim.yaml` with its Redis not started says why it is degraded."""
    body = {"status": "degraded", "models": {"k2": {"status": "HEALTHY"}},
            "shared_state": {"sessions": {"backend": "redis", "url": "redis://127.0.0.1:6399/0",
                                          "reachable": False, "meanwhile": "serving without history"},
                             "rate_limits": {"backend": "redis", "reachable": True}}}
    assert health_summary(body) == ("gateway degraded — sessions store at redis://127.0.0.1:6399/0 "
                                    "unreachable; serving without history")


def test_the_ingress_roll_call_says_whether_every_replica_routes_alike():
    """`horizon status` after a change of the live settings: one line says whether every ingress
    replica took it, and the gateway's line says so only when they differ."""
    body = {"status": "ready", "models": {}}
    assert ingress_summary(body) is None
    body["ingress"] = {"replicas": 2, "routing_settings": {"aaa": 2}, "routing": {"ready": 2}}
    assert ingress_summary(body) == "ingress: 2 replicas reporting, all route with settings aaa"
    assert health_summary(body) == "gateway ready"
    body["ingress"] = {"replicas": 2, "routing_settings": {"aaa": 1, "bbb": 1},
                       "routing": {"pending": 1, "ready": 1}}
    assert ingress_summary(body) == ("ingress: 2 replicas reporting, routing settings aaa on 1, "
                                     "bbb on 1 (1 pending)")
    assert health_summary(body) == "gateway ready — ingress replicas route with different settings: aaa on 1, bbb on 1"
    # A replica that reported no routing state (yet) is counted, not attributed to a digest.
    body["ingress"] = {"replicas": 2, "routing_settings": {"aaa": 1}, "routing": {"ready": 1}}
    assert ingress_summary(body) == "ingress: 2 replicas reporting, routing settings aaa on 1"


def test_only_the_gateways_own_health_answer_is_read_as_its_state():
    """Before the application is deployed HAProxy answers ``/health`` itself with an OpenAI
    404; that is no gateway state (it printed as "gateway unknown — {...}"), while the
    gateway's 503 while it starts is one."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from serve_app.tools.serve import get_health

    answers = {"/a/health": (404, {"error": {"message": "no application serves /a/health",
                                             "code": "not_found"}}),
               "/b/health": (503, {"status": "starting", "waiting_for": ["model-k2"]}),
               "/c/health": (200, {"status": "ready"})}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            code, body = answers[self.path]
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert get_health(f"{base}/a") is None
        assert get_health(f"{base}/b") == answers["/b/health"][1]
        assert get_health(f"{base}/c") == {"status": "ready"}
    finally:
        server.shutdown()
        server.server_close()
