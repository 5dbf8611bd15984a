"""The OpenAI-compatible HTTP surface: parse, authenticate, call the gateway, frame the answer.

Routes are plain functions over one :class:`~serve_app.serving.gateway.Gateway`, so the same app
runs inside the Serve ingress replica and in process under FastAPI's test client. What each
route does is the gateway's; here are only bodies, headers, status codes and SSE framing.
"""

from __future__ import annotations

import time
from typing import AsyncIterator, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from fastapi.routing import APIRoute
from starlette.routing import Route

from serve_app.chat.context import ChatOutcome
from serve_app.auth.keys import Principal
from serve_app.errors import HorizonError, InvalidRequest, PayloadTooLarge
from serve_app.json_wire import JSONAnswer
from serve_app.messages.chunks import Chunk
from serve_app.serving.gateway import Gateway, header_flag

from .conversations import ConversationArchive, ConversationCreate, ConversationUpdate, ItemsCreate
from .errors import install_error_handlers
from .response_archive import ResponseArchive
from .protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest, parse_model
from .responses import ResponsesRequest, input_items, response_events, response_object, to_chat_request
from .sse import sse_stream


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing anything over ``limit`` bytes before reading it all."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        # Bodies are read as they come; a compressed one would fail as "not valid JSON" with a
        # byte offset that explains nothing. 415 is HTTP's answer to an unsupported coding.
        raise InvalidRequest(f"Content-Encoding {encoding!r} is not supported: send the body "
                             "uncompressed", code="unsupported_content_encoding", status=415)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _asks_debug(headers) -> bool:
    """``x-vsr-debug: true`` among ASGI headers (names are lower-case in ASGI; the value is
    matched case-blind). Every request passes here, so nothing is built for the other headers."""
    return any(name == b"x-vsr-debug" and value.lower() == b"true" for name, value in headers)


class ReplicaHeader:
    """Answers to ``x-vsr-debug: true`` requests (errors and streams included) carry
    ``x-vsr-replica``: which ingress replica served them. Plain ASGI, so a stream is untouched."""

    def __init__(self, app, replica: str):
        self.app = app
        self.replica = replica.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not _asks_debug(scope.get("headers", ())):
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-vsr-replica", self.replica)]}
            await send(message)

        return await self.app(scope, receive, tagged)


def create_app(gateway: Gateway) -> FastAPI:
    app = FastAPI(title="K2 Horizon", description="OpenAI-compatible endpoint for a routed LLM fleet")
    install_error_handlers(app)
    server = gateway.cfg.global_.server
    if gateway.replica:
        app.add_middleware(ReplicaHeader, replica=gateway.replica)

    async def principal(request: Request):
        return await gateway.principal(request.headers.get("authorization"))

    async def parsed_body(model_cls: type, request: Request):
        """The request body read (413 over the size limit) and validated as ``model_cls`` (400
        for JSON that is not, or that nests deeper than the limit)."""
        raw = await read_body(request, server.max_request_body_bytes)
        return parse_model(model_cls, raw, max_depth=server.max_json_depth)

    async def answer(outcome: ChatOutcome, started: float, *,
                     frame: Callable[[Chunk, AsyncIterator[Chunk]], AsyncIterator[bytes]]):
        """JSON for a complete answer, SSE for a stream (``frame`` writes the route's events
        from the chunks)."""
        if outcome.response is not None:
            return JSONAnswer(outcome.response, headers=outcome.headers)
        chunks = outcome.chunks.__aiter__()
        # The first chunk is already in hand (the service waited for it): a failure before any
        # content was a plain HTTP error above, never an error inside an SSE stream.
        first = await chunks.__anext__()
        gateway.record_first_chunk(outcome, started)
        headers = {**outcome.headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(frame(first, chunks), media_type="text/event-stream", headers=headers)

    def chat_sse(include_usage: bool):
        return lambda first, rest: sse_stream(first, rest, include_usage=include_usage)

    async def chat_completions(request: Request):
        """Chat completion (OpenAI): routed, Fusion, or a named fleet model."""
        started = time.perf_counter()
        caller = await principal(request)
        req = await parsed_body(ChatCompletionRequest, request)
        outcome = await gateway.chat(req.to_call(), caller, request.headers)
        return await answer(outcome, started, frame=chat_sse(req.include_usage))

    async def completions(request: Request):
        """Text completion (OpenAI legacy): routed on the prompt, or a named fleet model."""
        started = time.perf_counter()
        caller = await principal(request)
        req = await parsed_body(CompletionRequest, request)
        outcome = await gateway.completions(req.to_call(), caller, request.headers)
        return await answer(outcome, started, frame=chat_sse(req.include_usage))

    def archive(caller: Principal) -> ResponseArchive:
        return ResponseArchive(gateway.response_store, caller, gateway.cfg.sessions)

    def conversations(caller: Principal) -> ConversationArchive:
        return ConversationArchive(gateway.conversation_store, caller, gateway.cfg.sessions)

    async def responses(request: Request):
        """Response (OpenAI Responses API): the chat path, in Responses' shape; stored unless
        ``store: false``, continued with ``previous_response_id`` or in a ``conversation``."""
        started = time.perf_counter()
        caller = await principal(request)
        req = await parsed_body(ResponsesRequest, request)
        stored, talks = archive(caller), conversations(caller)
        conversation = await talks.history(req.conversation_id, req.previous_response_id, request.headers)
        continued = await stored.continuation(req.previous_response_id, request.headers)
        translated = (to_chat_request(req, conversation.messages, "conversation") if conversation is not None
                      else to_chat_request(req, continued.messages))
        keeps = stored.keeps(req.store)

        async def finish(response: dict) -> None:
            """What an answered response leaves behind: its turn in its conversation, and the
            stored response (``store`` says whether it could be); the input items have the same
            ids in both."""
            inputs = input_items(req)
            if conversation is not None:
                await talks.extend(conversation.id, [*inputs, *response["output"]])
            if keeps:
                response["store"] = await stored.keep(response, inputs, continued)

        after = finish if keeps or conversation is not None else None
        try:   # errors up to the first chunk of a stream are plain HTTP errors, named as sent
            outcome = await gateway.chat(translated.chat.to_call(drop_oldest_to_fit=req.truncation == "auto"),
                                         caller, request.headers)
            if outcome.response is None:
                return await answer(outcome, started, frame=lambda first, rest: response_events(
                    req, outcome.model or req.model, first, rest, stored=keeps, finish=after))
        except HorizonError as exc:
            raise translated.reword(exc)
        body = response_object(req, outcome.response, stored=keeps)
        if after is not None:
            await after(body)
        return JSONAnswer(body, headers=outcome.headers)

    def stored(view: Callable[[Principal], object], call: str, doc: str, *params: str,
               body: Optional[type] = None, query: bool = False):
        """An endpoint of stored state (responses, conversations): one caller's view of it
        (``view``) answers ``call`` with the path's ``params``, then the parsed ``body`` model,
        then the query parameters."""
        async def endpoint(request: Request):
            target = view(await principal(request))
            args: list = [request.path_params[name] for name in params]
            if body is not None:
                args.append(await parsed_body(body, request))
            if query:
                args.append(request.query_params)
            return JSONAnswer(await getattr(target, call)(*args))

        endpoint.__doc__, endpoint.__name__ = doc, f"{view.__name__}_{call}"   # the schema's summary, Starlette's name
        return endpoint

    async def route(request: Request):
        """The routing decision for a chat request, without generating."""
        await principal(request)
        req = await parsed_body(ChatCompletionRequest, request)
        debug = header_flag(request.headers, "x-vsr-debug", False)
        body, headers = await gateway.route(req.to_call(), debug)
        return JSONAnswer(body, headers=headers)

    async def list_models(request: Request):
        """The models this caller may name: fleet aliases, auto and Fusion slugs."""
        return JSONAnswer(gateway.models(await principal(request)))

    async def retrieve_model(request: Request):
        """One model of the list."""
        return JSONAnswer(gateway.model(request.path_params["model_id"], await principal(request)))

    async def embeddings(request: Request):
        """Embeddings (OpenAI) from the profile's embedding model."""
        caller = await principal(request)
        req = await parsed_body(EmbeddingRequest, request)
        return JSONAnswer(await gateway.embed(caller, req.model, req.texts, req.encoding_format,
                                              req.dimensions, req.truncate_prompt_tokens,
                                              req.truncation_side))

    async def health(request: Request):
        """Readiness and the fleet's state (503 while starting)."""
        body = await gateway.health()
        starting = body["status"] == "starting"
        return JSONAnswer(body, status_code=503 if starting else 200,
                          headers={"Retry-After": "2"} if starting else {})

    async def metrics(request: Request):
        """Prometheus text of this node's Ray metrics agent (docs/observability.md)."""
        return PlainTextResponse(await gateway.metrics(), media_type="text/plain; version=0.0.4")

    # Plain Starlette routes, not FastAPI's: every endpoint reads its raw body and validates it
    # itself (parse_model: OpenAI-style errors naming the field), so FastAPI's per-request
    # dependency solving would be pure overhead (a sixth of the app's time per chat request,
    # in process). The OpenAPI schema still lists them (openapi_paths).
    for path, method, endpoint in (
            ("/v1/chat/completions", "POST", chat_completions),
            ("/v1/completions", "POST", completions),
            ("/v1/responses", "POST", responses),
            ("/v1/responses/{response_id}/input_items", "GET", stored(
                archive, "input_items", "The input items of a stored response (OpenAI's list, paged).", "response_id",
                query=True)),
            ("/v1/responses/{response_id}/cancel", "POST", stored(
                archive, "cancel", "Cancel a background response: there are none here (a stored one is a 400).",
                "response_id")),
            ("/v1/responses/{response_id:path}", "GET", stored(
                archive, "response", "A stored response (store was not false), as it was answered.", "response_id")),
            ("/v1/responses/{response_id:path}", "DELETE", stored(
                archive, "delete", "Delete a stored response.", "response_id")),
            ("/v1/conversations", "POST", stored(
                conversations, "create", "Create a conversation (OpenAI Conversations API), with up to 20 first items.",
                body=ConversationCreate)),
            ("/v1/conversations/{conversation_id}", "GET", stored(
                conversations, "retrieve", "A conversation.", "conversation_id")),
            ("/v1/conversations/{conversation_id}", "POST", stored(
                conversations, "update", "Replace a conversation's metadata.", "conversation_id",
                body=ConversationUpdate)),
            ("/v1/conversations/{conversation_id}", "DELETE", stored(
                conversations, "delete", "Delete a conversation and its items.", "conversation_id")),
            ("/v1/conversations/{conversation_id}/items", "GET", stored(
                conversations, "items", "A conversation's items (OpenAI's list, paged).", "conversation_id",
                query=True)),
            ("/v1/conversations/{conversation_id}/items", "POST", stored(
                conversations, "add_items", "Add up to 20 items to a conversation.", "conversation_id",
                body=ItemsCreate)),
            ("/v1/conversations/{conversation_id}/items/{item_id}", "GET", stored(
                conversations, "item", "One item of a conversation.", "conversation_id", "item_id")),
            ("/v1/conversations/{conversation_id}/items/{item_id}", "DELETE", stored(
                conversations, "delete_item", "Delete one item of a conversation (answers the conversation).",
                "conversation_id", "item_id")),
            ("/v1/route", "POST", route),
            ("/v1/models", "GET", list_models),
            ("/v1/models/{model_id:path}", "GET", retrieve_model),
            ("/v1/embeddings", "POST", embeddings),
            ("/health", "GET", health),
            ("/metrics", "GET", metrics)):
        app.add_route(path, endpoint, methods=[method])
    app.openapi = lambda: openapi_paths(app)  # type: ignore[method-assign]
    return app


def openapi_paths(app: FastAPI) -> dict:
    """FastAPI documents only its own routes: this schema lists the plain ones, each with its
    endpoint's one-line summary (bodies are documented in docs/openai_compat.md)."""
    if app.openapi_schema is None:
        paths: dict = {}
        for r in app.routes:
            if isinstance(r, Route) and not isinstance(r, APIRoute) and r.include_in_schema:
                for method in sorted(r.methods or ()):
                    if method != "HEAD":
                        paths.setdefault(r.path.replace(":path}", "}"), {})[method.lower()] = {
                            "summary": (r.endpoint.__doc__ or r.name).strip().splitlines()[0],
                            "responses": {"200": {"description": "OpenAI-compatible JSON"}}}
        app.openapi_schema = {"openapi": "3.1.0", "paths": paths,
                              "info": {"title": app.title, "description": app.description,
                                       "version": app.version}}
    return app.openapi_schema
