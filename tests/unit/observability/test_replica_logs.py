"""A replica's logging: our lines go into Serve's replica log at their own level, and Serve's
buffered replica log reaches its file within the flush interval.

The buffer is the one Ray Serve builds for a replica in the fast mode
(``configure_component_logger`` with a buffer of 1,000 records), set up here in a temporary
folder; the loggers are restored afterwards."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from ray.serve._private.logging_utils import configure_component_logger
from logger_state import loggers_restored
from ray.serve.schema import LoggingConfig

from serve_app.observability import replica_logs
from serve_app.observability.logging import configure_logging, serve_log_buffers, serve_replica_logger
from serve_app.observability.replica_logs import (FLUSH_ENV, ServeLogFlusher, flush_interval_s,
                                                  flush_serve_logs, reattach_serve_logs,
                                                  route_library_logs, start_serve_log_flusher)


@pytest.fixture
def serve_replica_log(tmp_path: Path, request):
    """Serve's replica logger as the fast mode configures it (``encoding`` TEXT, or the
    test's parameter); yields its log file."""
    encoding = getattr(request, "param", "TEXT")
    logger = logging.getLogger("ray.serve")
    with loggers_restored("ray.serve", "serve_app", "deployments"):
        configure_component_logger(component_name="horizon_ingress", component_id="abc123",
                                   logging_config=LoggingConfig(logs_dir=str(tmp_path), encoding=encoding),
                                   max_bytes=10_000_000, backup_count=1, buffer_size=1000)
        try:
            files = list(tmp_path.glob("*.log"))
            assert len(files) == 1, files
            yield files[0]
        finally:
            for handler in logger.handlers:
                handler.close()


@pytest.fixture
def no_process_flusher():
    """Stops the flusher an earlier test's in-process deployment started (it flushes every
    "ray.serve" buffer of this process); the next start makes a new one."""
    running = replica_logs._flusher
    if running is not None:
        running.stop()
        running.join(timeout=5)
    replica_logs._flusher = None
    yield
    replica_logs._flusher = None


@pytest.fixture
def vllm_logging_restored():
    """vLLM's logging setup changes the whole process: the log record factory (wrapped), its
    record of the last setup applied, and the ``vllm`` and ``httpx`` loggers. Put back after."""
    import vllm.logger as vllm_logger

    factory, last = logging.getLogRecordFactory(), vllm_logger._last_configured_logging_config
    try:
        with loggers_restored("vllm", "httpx"):
            yield vllm_logger
    finally:
        logging.setLogRecordFactory(factory)
        vllm_logger._last_configured_logging_config = last


def wait_for(path: Path, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return True
        time.sleep(0.02)
    return False


def test_serve_buffers_a_replicas_lines_until_a_thousand_come(no_process_flusher, serve_replica_log):
    """The fault: in the fast mode a line waits in memory for 999 more."""
    assert [h.capacity for h in serve_log_buffers()] == [1000]
    logging.getLogger("ray.serve").warning("request failed: 503 the only line")
    assert not wait_for(serve_replica_log, "the only line", 0.5)


def test_the_flusher_writes_a_buffered_line_within_its_interval(serve_replica_log):
    flusher = ServeLogFlusher(0.1)
    flusher.start()
    try:
        started = time.monotonic()
        logging.getLogger("ray.serve").warning("request failed: 404 req-flush-1")
        assert wait_for(serve_replica_log, "req-flush-1", 2.0)
        assert time.monotonic() - started < 1.0
        # Serve's format is kept: the line is the replica's, with its level.
        line = next(line for line in serve_replica_log.read_text().splitlines() if "req-flush-1" in line)
        assert line.startswith("WARNING") and "horizon_ingress abc123" in line
        # And the clock keeps going: a later line is written too.
        logging.getLogger("ray.serve").info("second line req-flush-2")
        assert wait_for(serve_replica_log, "req-flush-2", 2.0)
    finally:
        flusher.stop()
        flusher.join(timeout=2)
    assert not flusher.is_alive()


def test_the_interval_comes_from_the_environment_and_a_bad_value_names_the_variable():
    assert flush_interval_s({}) == 1.0
    assert flush_interval_s({FLUSH_ENV: " 0.25 "}) == 0.25
    assert flush_interval_s({FLUSH_ENV: "0"}) == 0.0
    for bad in ("soon", "-1", "nan", "1e9"):
        with pytest.raises(ValueError, match=FLUSH_ENV):
            flush_interval_s({FLUSH_ENV: bad})


def test_one_flusher_per_process_and_none_when_turned_off(no_process_flusher):
    assert start_serve_log_flusher({FLUSH_ENV: "0"}) is None
    first = start_serve_log_flusher({FLUSH_ENV: "30"})
    try:
        assert first is not None and first.is_alive() and first.daemon
        assert start_serve_log_flusher({FLUSH_ENV: "30"}) is first
    finally:
        first.stop()
        first.join(timeout=2)


def test_in_a_replica_our_lines_go_to_its_log_at_their_own_level(serve_replica_log):
    assert serve_replica_logger() is logging.getLogger("ray.serve")
    configure_logging()
    logging.getLogger("serve_app.redis_client").warning(
        "sessions Redis unreachable", extra={"redis_url": "redis://h:6379", "messages": "secret prompt"})
    flush_serve_logs()
    line = next(line for line in serve_replica_log.read_text().splitlines() if "unreachable" in line)
    # Serve's format and the replica's tag, the record's own level (it was INFO in the fast
    # mode, where Serve's stderr redirect turned every line into an INFO one).
    assert line.startswith("WARNING") and "horizon_ingress abc123" in line
    # An ERROR of ours writes the buffer at once, as Serve's own errors do.
    logging.getLogger("deployments.embedding").error("encoder failed")
    assert "encoder failed" in serve_replica_log.read_text()


@pytest.mark.parametrize("serve_replica_log", ["JSON"], indirect=True)
@pytest.mark.parametrize("log_payloads", [False, True])
def test_with_serves_json_encoding_extra_fields_show_and_payloads_only_when_turned_on(
        serve_replica_log, log_payloads):
    configure_logging(log_payloads=log_payloads)
    logging.getLogger("serve_app.api").warning("answered", extra={"content": "the answer text",
                                                                  "decision": "code"})
    flush_serve_logs()
    entry = json.loads(serve_replica_log.read_text().splitlines()[-1])
    assert entry["message"] == "answered" and entry["levelname"] == "WARNING"
    assert entry["decision"] == "code"
    assert entry["content"] == ("the answer text" if log_payloads else "[redacted]")


def test_outside_a_replica_there_is_no_serve_logger_to_use():
    assert serve_replica_logger() is None


def test_a_log_closed_by_a_dictconfig_is_given_its_file_back(no_process_flusher, serve_replica_log):
    """vLLM's engine start applies its logging with dictConfig, which closes every handler of
    the process. Serve's closed buffer dropped its file, wrote nothing again and kept every
    later record in memory; the replica's logging puts the file back."""
    import logging.config

    buffer = serve_log_buffers()[0]
    reattach_serve_logs()                       # as start_replica_logging, before the engine
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})   # vLLM's call
    assert buffer.target is None
    serve_logger = logging.getLogger("ray.serve")
    for n in range(5):
        serve_logger.info("CALL chat_body OK %d", n)
    buffer.flush()                              # Serve's own flush: nothing to write to
    assert len(buffer.buffer) == 5              # the fault: kept in memory, never written
    assert "CALL chat_body" not in serve_replica_log.read_text()
    assert reattach_serve_logs() == 1
    flush_serve_logs()
    text = serve_replica_log.read_text()
    assert all(f"CALL chat_body OK {n}" in text for n in range(5)) and buffer.buffer == []
    serve_logger.warning("and later lines")
    flush_serve_logs()
    assert "and later lines" in serve_replica_log.read_text()


def test_vllms_lines_reach_the_replica_log_at_their_own_level(no_process_flusher, serve_replica_log, capsys,
                                                              vllm_logging_restored):
    """vLLM's logging setup prints its lines to stdout, which Serve logs as INFO whatever their
    level (``INFO … -- (MainProcess pid=…) WARNING …``); routed, a vLLM warning is a WARNING
    line of the replica's log, once, and vLLM's own level still filters."""
    from vllm.config.logging import LoggingConfig

    reattach_serve_logs()
    vllm_logging_restored.configure_logging(LoggingConfig(log_level="INFO"))   # vLLM's own, as its engine start
    reattach_serve_logs()
    frontend = logging.getLogger("vllm.v1.engine.async_llm")
    frontend.warning("before: printed for Serve's redirect")
    assert "before: printed" in capsys.readouterr().out
    assert route_library_logs("vllm") and route_library_logs("vllm")   # again: one handler
    frontend.warning("KV cache usage %d%%, preempting", 97)
    frontend.info("an info line")
    frontend.debug("below vLLM's level")
    flush_serve_logs()
    lines = serve_replica_log.read_text().splitlines()
    assert [line.split()[0] for line in lines if "preempting" in line] == ["WARNING"]
    assert any(line.startswith("INFO ") and "an info line" in line for line in lines)
    assert not any("below vLLM's level" in line for line in lines)
    assert capsys.readouterr().out == ""            # no second copy on stdout


def test_outside_a_replica_a_librarys_logger_is_left_as_it_is():
    with loggers_restored("vllm"):
        logger = logging.getLogger("vllm")
        handler = logging.StreamHandler()
        logger.handlers[:] = [handler]
        assert route_library_logs("vllm") is False
        assert logger.handlers == [handler]


def test_an_operators_own_vllm_logging_config_is_left_alone(no_process_flusher, serve_replica_log):
    """``VLLM_LOGGING_CONFIG_PATH`` in a model's ``engine.env`` is the operator's choice of
    handlers for vLLM: the replica does not replace them."""
    from deployments.vllm_server import route_vllm_logs

    with loggers_restored("vllm"):
        logger = logging.getLogger("vllm")
        theirs = logging.StreamHandler()
        logger.handlers[:] = [theirs]
        assert route_vllm_logs({"VLLM_LOGGING_CONFIG_PATH": "/etc/vllm/logging.json"}) is False
        assert logger.handlers == [theirs]
        assert route_vllm_logs({}) is True
        assert theirs not in logger.handlers and len(logger.handlers) == 1


LOCAL = Path(__file__).resolve().parents[3] / "configs" / "local.yaml"


def test_vllms_setup_applied_before_its_engine_starts_keeps_the_start_lines_at_their_level(
        no_process_flusher, serve_replica_log, capsys, vllm_logging_restored):
    """The vLLM replica applies vLLM's logging setup before the engine starts and routes it;
    the engine start's own call (``create_engine_config``: ``configure_logging_if_needed``
    with its arguments' setup) is then skipped, so the start's lines (the configuration's
    warnings) come at their level too, and Serve's log is not closed again."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    from deployments.model_assets import resolve_model_path
    from deployments.vllm_server import apply_vllm_logging
    from serve_app.config.loader import load_config

    vllm_logger = vllm_logging_restored
    vllm_logger._last_configured_logging_config = None      # a new replica process
    reattach_serve_logs()                       # as start_replica_logging, first
    assert apply_vllm_logging({}) is True
    buffer = serve_log_buffers()[0]
    # The engine start's call, with the embedded default's engine arguments.
    engine_args = AsyncEngineArgs(model=resolve_model_path(load_config(LOCAL).model("k2").engine.model))
    vllm_logger.configure_logging_if_needed(engine_args.create_logging_config())
    assert buffer.target is not None            # not closed by a second dictConfig
    logging.getLogger("vllm.config.vllm").warning("Enforce eager set, disabling torch.compile")
    flush_serve_logs()
    lines = serve_replica_log.read_text().splitlines()
    assert [line.split()[0] for line in lines if "Enforce eager" in line] == ["WARNING"]
    assert "Enforce eager" not in capsys.readouterr().out
