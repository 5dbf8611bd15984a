"""Stored responses as the Responses API sees them: ``store``, ``previous_response_id``,
``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``, over one
caller's view of the response store (serve_app.sessions.stored_responses).

A continuation (``previous_response_id``) reads the stored conversation (the response, then
every earlier turn of its chain in a single read) and puts it before the request's ``input``;
the request's own ``instructions`` come first, the stored response's are not carried over
(OpenAI's rule). It
cannot be combined with a session (``X-Session-ID``): two histories for one request would each
be forwarded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from serve_app.errors import HorizonError, InvalidRequest, ModelNotFound

from .caller_records import CallerRecords
from .paging import item_page
from .responses import listed_item, stored_turn_messages

log = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class Continuation:
    """What a request continues: the conversation's chat messages, and the ids of its stored
    responses, oldest first (the new response's ancestors). Empty for a new conversation."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)


class ResponseArchive(CallerRecords):
    """The stored responses one caller may see (serve_app.api.caller_records)."""

    kind = "responses"

    def keeps(self, store_requested: Optional[bool]) -> bool:
        """Whether this request's response is stored (OpenAI's default: yes)."""
        return self.store is not None and store_requested is not False

    def _not_found(self, response_id: str, param: Optional[str] = None) -> HorizonError:
        why = ("this gateway stores no responses (sessions.store_responses is off); send the "
               "conversation in 'input' or keep it in a session (X-Session-ID)") if self.store is None else \
            "never stored (store: false), deleted, or older than sessions.responses_ttl_s"
        return ModelNotFound(f"response {response_id!r} not found: {why}", param=param or "response_id",
                             code="response_not_found")

    async def continuation(self, previous_response_id: Optional[str], headers: Mapping[str, str]) -> Continuation:
        """The conversation ``previous_response_id`` ends (none without it); its TTL restarts."""
        if previous_response_id is None:
            return Continuation()
        self._check_history_source("previous_response_id", headers)
        record = await self._record(previous_response_id)
        if record is None:
            raise InvalidRequest(f"Previous response with id {previous_response_id!r} not found (never stored, "
                                 f"deleted, or older than sessions.responses_ttl_s)",
                                 param="previous_response_id", code="previous_response_not_found")
        chain = [*(record.get("ancestors") or []), previous_response_id]
        earlier = await self.store.get_many(chain[:-1])
        missing = [rid for rid, r in zip(chain, earlier) if not self._mine(r)]
        if missing:
            raise InvalidRequest(f"Previous response {previous_response_id!r} continues {missing[0]!r}, which is "
                                 "deleted or older than sessions.responses_ttl_s: its conversation is incomplete",
                                 param="previous_response_id", code="previous_response_not_found")
        await self.store.refresh(chain)
        return Continuation(stored_turn_messages([*earlier, record]), chain)

    async def keep(self, response: dict[str, Any], inputs: list[dict[str, Any]], continued: Continuation) -> bool:
        """Store ``response`` with its turn (the request's input items; the answer is the
        response's output) and its place in the conversation; False (and a warning) when the
        store cannot take it: the answer still goes out, marked ``store: false``."""
        if self.store is None:
            return False
        record = {"owner": self.owner, "response": response, "input_items": inputs, "ancestors": continued.chain}
        try:
            await self.store.put(response["id"], record)
        except HorizonError as exc:
            log.warning("response %s answered but not stored: %s", response["id"], exc.message)
            return False
        return True

    async def response(self, response_id: str) -> dict[str, Any]:
        """``GET /v1/responses/{id}``: the stored response object, or a 404."""
        return (await self._found(response_id))["response"]

    async def input_items(self, response_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        """``GET /v1/responses/{id}/input_items``: the items the request sent, one page of
        OpenAI's list (serve_app.api.paging)."""
        items = [listed_item(item) for item in (await self._found(response_id))["input_items"]]
        return item_page(items, query, of=f"response {response_id!r}")

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """``POST /v1/responses/{id}/cancel``: OpenAI cancels only ``background`` responses, and
        the gateway runs none (each ends with its request), so a stored one is a 400 saying so
        and an unknown one the usual 404."""
        await self._found(response_id)
        raise InvalidRequest(f"response {response_id!r} cannot be cancelled: only background responses can be, and "
                             "this gateway runs none (a response ends with its request; close the connection to "
                             "stop a stream)", param="response_id", code="invalid_value")

    async def delete(self, response_id: str) -> dict[str, Any]:
        """``DELETE /v1/responses/{id}``: OpenAI's deletion object, or a 404."""
        await self._found(response_id)
        if not await self.store.delete(response_id):   # expired (or deleted) since it was read
            raise self._not_found(response_id)
        return {"id": response_id, "object": "response", "deleted": True}


__all__ = ["Continuation", "ResponseArchive"]
