"""A tiny OpenAI-compatible HTTP server on 127.0.0.1 for load-test tests (threads, stdlib)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKENS = 5
TTFT_S = 0.02
TPOT_S = 0.005


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "FakeOpenAIServer"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.server.health_calls += 1
            self._json(200, {"status": "ready", "models": {"qwen-72b": {"replicas": 1 + self.server.health_calls % 2},
                                                           "coder": {"replicas": 1}}})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)
        self.server.peers.add(self.client_address)
        text = json.dumps(body["messages"])
        decision = "code" if "```" in text else "general_chat"
        model = "coder" if decision == "code" else "qwen-72b"
        headers = {"x-vsr-selected-decision": decision, "x-vsr-selected-model": model}
        if "fail" in text or self.server.fail_every_request:
            self._json(503, {"error": {"message": "overloaded", "type": "service_unavailable"}}, headers)
            return
        time.sleep(TTFT_S)
        if not body.get("stream"):
            self._json(200, {"id": "x", "object": "chat.completion", "model": model,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "a b c d e"},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": TOKENS, "total_tokens": 8}}, headers)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        # Chunked, as uvicorn sends SSE: the client sees each event when it is written.
        self.send_header("transfer-encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
        chunks += [{"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]} for i in range(TOKENS)]
        chunks += [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": TOKENS, "total_tokens": 8}}]
        for i, c in enumerate(chunks):
            if i > 1:
                time.sleep(TPOT_S)
            self._chunk(f"data: {json.dumps(c)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class FakeOpenAIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, fail_every_request: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        # Every chat request gets a 503 (a fleet that serves nothing; /health still answers).
        self.fail_every_request = fail_every_request
        self.requests: list[dict[str, Any]] = []
        # (host, port) of every connection a request came in on: how many a client opened.
        self.peers: set[tuple[str, int]] = set()
        self.health_calls = 0
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> "FakeOpenAIServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
