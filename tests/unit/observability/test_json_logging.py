"""JSON logs carry request_id on every line; payloads stay out unless log_payloads."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from logger_state import loggers_restored
from serve_app.config.observability import ObservabilitySettings
from serve_app.observability.logging import REDACTED, configure_logging, log_payload
from serve_app.observability.request_id import (bound_request_id, current_request_id,
                                                resolve_request_id)

LOGGER_NAMES = ("serve_app", "deployments")


@pytest.fixture
def logs():
    """Configure JSON logging into a buffer; restore the loggers afterwards."""
    buffer = io.StringIO()

    def configure(**kwargs):
        configure_logging(stream=buffer, **kwargs)
        return buffer

    with loggers_restored(*LOGGER_NAMES):
        yield configure


def lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def test_every_line_is_json_with_the_current_request_id(logs):
    buffer = logs()
    log = logging.getLogger("serve_app.routing.test")
    log.info("outside any request")
    with bound_request_id("req-abc"):
        log.info("routing %s", "chat", extra={"decision": "chat", "latency_ms": 3})
        logging.getLogger("deployments.simulated").warning("slow")
    records = lines(buffer)
    assert [r["request_id"] for r in records] == ["-", "req-abc", "req-abc"]
    assert records[1]["message"] == "routing chat"
    assert records[1]["decision"] == "chat" and records[1]["latency_ms"] == 3
    assert records[1]["level"] == "INFO" and records[1]["logger"] == "serve_app.routing.test"
    assert records[2]["level"] == "WARNING"
    assert records[0]["ts"].endswith("+00:00")


def test_request_id_follows_concurrent_tasks(logs):
    buffer = logs()
    log = logging.getLogger("serve_app.fusion.test")

    async def panel_member(name):
        await asyncio.sleep(0)
        log.info("member %s done", name)

    async def handle(request_id):
        with bound_request_id(request_id):
            await asyncio.gather(panel_member("a"), panel_member("b"))

    async def main():
        await asyncio.gather(handle("req-1"), handle("req-2"))

    asyncio.run(main())
    by_id = {}
    for r in lines(buffer):
        by_id.setdefault(r["request_id"], []).append(r["message"])
    assert sorted(by_id) == ["req-1", "req-2"]
    assert all(len(v) == 2 for v in by_id.values())
    assert current_request_id() is None


def test_exceptions_are_inside_the_json_line(logs):
    buffer = logs()
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("serve_app.x").exception("failed")
    (record,) = lines(buffer)
    assert "RuntimeError: boom" in record["exception"]


def test_payloads_are_not_logged_by_default(logs):
    buffer = logs()
    log = logging.getLogger("serve_app.api.test")
    log_payload(log, "request", messages=[{"role": "user", "content": "secret prompt"}])
    log.info("answered", extra={"content": "secret completion", "tokens": 5})
    text = buffer.getvalue()
    assert "secret" not in text
    (record,) = lines(buffer)
    assert record["content"] == REDACTED and record["tokens"] == 5


def test_payloads_are_logged_when_the_operator_turns_it_on(logs):
    buffer = logs(log_payloads=True)
    log = logging.getLogger("serve_app.api.test")
    log_payload(log, "request", messages=[{"role": "user", "content": "visible prompt"}])
    (record,) = lines(buffer)
    assert record["messages"][0]["content"] == "visible prompt"


def test_reconfiguring_replaces_the_handler_and_sets_level(logs):
    logs()
    buffer = logs(settings=ObservabilitySettings(log_level="WARNING"))
    logger = logging.getLogger("serve_app")
    assert sum(1 for h in logger.handlers if getattr(h, "_horizon_handler", False)) == 1
    logging.getLogger("serve_app.y").info("hidden")
    logging.getLogger("serve_app.y").warning("shown")
    assert [r["message"] for r in lines(buffer)] == ["shown"]


def test_text_format_still_carries_request_id(logs):
    buffer = logs(settings=ObservabilitySettings(log_format="text"))
    with bound_request_id("req-txt"):
        logging.getLogger("serve_app.z").info("hello")
    assert "[req-txt] hello" in buffer.getvalue()


@pytest.mark.parametrize("header, kept", [
    ("client-trace-42", True), ("  abc.DEF:1  ", True), (None, False), ("", False),
    ("has space", False), ("x" * 200, False), ("quote\"d", False), ("línea", False),
])
def test_client_request_ids_are_kept_only_when_safe(header, kept):
    value = resolve_request_id(header)
    if kept:
        assert value == header.strip()
    else:
        assert value.startswith("req-") and len(value) == 36
