"""HTTP side of error handling: every failure leaves as an OpenAI error body, never a trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from serve_app.errors import HorizonError, InvalidRequest, ModelNotFound
from serve_app.json_wire import JSONAnswer

log = logging.getLogger("ray.serve")


def error_response(exc: HorizonError, extra_headers: dict[str, str] | None = None) -> JSONAnswer:
    headers = {**exc.headers(), **(extra_headers or {})}
    return JSONAnswer(exc.body(), status_code=exc.status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HorizonError)
    async def _horizon(_: Request, exc: HorizonError) -> JSONAnswer:
        if exc.status >= 500:
            log.warning("request failed: %s %s", exc.status, exc.message)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONAnswer:
        err = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or None
        return error_response(InvalidRequest(f"invalid value for '{param}': {err.get('msg', 'invalid')}",
                                             param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONAnswer:
        if exc.status_code == 404:
            return error_response(ModelNotFound("unknown route; see /v1/models and /docs", code="not_found"))
        if exc.status_code == 405:
            return error_response(InvalidRequest("method not allowed for this route",
                                                 code="method_not_allowed", status=405))
        return error_response(HorizonError(str(exc.detail), status=exc.status_code))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONAnswer:
        # Log the stack trace for operators; the client gets a clean message only.
        log.exception("unhandled error in ingress")
        return error_response(HorizonError("internal error while handling the request"))
