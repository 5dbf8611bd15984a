"""OpenAI's Conversations API over the response store: ``/v1/conversations`` (create, retrieve,
update its metadata, delete), its items (list, add, retrieve, delete one), and ``conversation``
on ``POST /v1/responses``, which answers after the conversation's items and then adds the
request's input and the response's output to it (OpenAI's Agents SDK keeps a session this way).

A conversation is one record (serve_app.sessions.stored_responses, its own keys): the
conversation object, its items oldest first (as sent: ids added, content listed as parts when
read), and its owner (the API key's name; another key gets the same 404 as for an id never
created). Adding items is an atomic update of the record, so two ingress replicas answering in
one conversation both land. A conversation lives ``sessions.responses_ttl_s`` after it was last
written or continued. Like previous_response_id, ``conversation`` cannot be combined with a
session (``X-Session-ID``) or with ``previous_response_id``: each would bring its own history.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from pydantic import Field

from serve_app.errors import HorizonError, InvalidRequest, ModelNotFound
from serve_app.sessions.stored_responses import Record

from .caller_records import CallerRecords
from .paging import item_page
from .protocol import OpenBody, checked_metadata
from .responses import item_messages, listed_item, stored_items

log = logging.getLogger("ray.serve")

MAX_ITEMS_PER_CALL = 20   # OpenAI's limit on items sent at once (create, items.create)


class ConversationCreate(OpenBody):
    """``POST /v1/conversations``."""

    items: Optional[list[dict[str, Any]]] = None
    metadata: Optional[dict[str, Any]] = None


class ConversationUpdate(OpenBody):
    """``POST /v1/conversations/{id}``."""

    metadata: Optional[dict[str, Any]]


class ItemsCreate(OpenBody):
    """``POST /v1/conversations/{id}/items``."""

    items: list[dict[str, Any]] = Field(..., min_length=1)


@dataclass(frozen=True)
class ConversationHistory:
    """The conversation a response continues: its id and its items as chat messages."""

    id: str
    messages: list[dict[str, Any]]


def _new_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items a client adds, checked as a response's input would be (a 400 names ``items[i]``)."""
    if len(items) > MAX_ITEMS_PER_CALL:
        raise InvalidRequest(f"at most {MAX_ITEMS_PER_CALL} items can be added at a time, got {len(items)}",
                             param="items")
    if not all(isinstance(item, dict) for item in items):
        raise InvalidRequest("'items' must be a list of item objects", param="items")
    item_messages(items, [f"items[{i}]" for i in range(len(items))])
    return stored_items(items)


class ConversationArchive(CallerRecords):
    """The conversations one caller may see (serve_app.api.caller_records)."""

    kind = "conversations"

    def _not_found(self, conversation_id: str, param: Optional[str] = None) -> HorizonError:
        why = ("this gateway stores no conversations (sessions.store_responses is off)" if self.store is None
               else "never created, deleted, or unused for longer than sessions.responses_ttl_s")
        return ModelNotFound(f"conversation {conversation_id!r} not found: {why}", param=param or "conversation_id",
                             code="conversation_not_found")

    async def _change(self, conversation_id: str, change: Callable[[Record], Record]) -> Record:
        """Apply ``change`` to the caller's conversation atomically (a 404 when it is not theirs)."""
        if self.store is None:
            raise self._not_found(conversation_id)
        updated = await self.store.update(conversation_id, lambda r: change(r) if self._mine(r) else None)
        if updated is None:
            raise self._not_found(conversation_id)
        return updated

    # ------------------------------------------------------------------ /v1/conversations
    async def create(self, body: ConversationCreate) -> dict[str, Any]:
        if self.store is None:
            raise InvalidRequest("conversations are not available: this gateway stores none "
                                 "(sessions.store_responses is off); send the whole conversation in 'input'",
                                 param=None, code="unsupported_parameter")
        conversation = {"id": f"conv_{uuid.uuid4().hex}", "object": "conversation", "created_at": int(time.time()),
                        "metadata": checked_metadata(body.metadata)}
        items = _new_items(body.items or [])
        await self.store.put(conversation["id"], {"owner": self.owner, "conversation": conversation, "items": items})
        return conversation

    async def retrieve(self, conversation_id: str) -> dict[str, Any]:
        return (await self._found(conversation_id))["conversation"]

    async def update(self, conversation_id: str, body: ConversationUpdate) -> dict[str, Any]:
        metadata = checked_metadata(body.metadata)

        def change(record: Record) -> Record:
            return {**record, "conversation": {**record["conversation"], "metadata": metadata}}

        return (await self._change(conversation_id, change))["conversation"]

    async def delete(self, conversation_id: str) -> dict[str, Any]:
        await self._found(conversation_id)
        if not await self.store.delete(conversation_id):   # expired (or deleted) since it was read
            raise self._not_found(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    # ------------------------------------------------------------------ items
    async def items(self, conversation_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        """One page of the conversation's items (serve_app.api.paging; newest first by default)."""
        items = [listed_item(item) for item in (await self._found(conversation_id))["items"]]
        return item_page(items, query, of=f"conversation {conversation_id!r}")

    async def add_items(self, conversation_id: str, body: ItemsCreate) -> dict[str, Any]:
        added = _new_items(body.items)
        await self._change(conversation_id, lambda record: {**record, "items": [*record["items"], *added]})
        listed = [listed_item(item) for item in added]
        return {"object": "list", "data": listed, "first_id": listed[0]["id"], "last_id": listed[-1]["id"],
                "has_more": False}

    async def item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        record = await self._found(conversation_id)
        found = next((item for item in record["items"] if item.get("id") == item_id), None)
        if found is None:
            raise ModelNotFound(f"item {item_id!r} not found in conversation {conversation_id!r}", param="item_id",
                                code="item_not_found")
        return listed_item(found)

    async def delete_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        """Delete one item; OpenAI answers with the conversation."""
        await self.item(conversation_id, item_id)   # a 404 naming the item when it is not there

        def change(record: Record) -> Record:
            return {**record, "items": [item for item in record["items"] if item.get("id") != item_id]}

        return (await self._change(conversation_id, change))["conversation"]

    # ------------------------------------------------------------------ POST /v1/responses
    async def history(self, conversation_id: Optional[str], previous_response_id: Optional[str],
                      headers: Mapping[str, str]) -> Optional[ConversationHistory]:
        """The conversation a response continues (None without ``conversation``); its TTL restarts."""
        if conversation_id is None:
            return None
        if not isinstance(conversation_id, str) or not conversation_id:
            raise InvalidRequest("invalid value for 'conversation': a conversation id, or {\"id\": ...}",
                                 param="conversation")
        self._check_history_source("conversation", headers)
        if previous_response_id is not None:
            raise InvalidRequest("'conversation' and 'previous_response_id' cannot be combined: each brings its "
                                 "own conversation; use one of them", param="conversation")
        record = await self._found(conversation_id, param="conversation")
        await self.store.refresh([conversation_id])
        items = record["items"]
        return ConversationHistory(conversation_id, item_messages(items, ["conversation"] * len(items))[0])

    async def extend(self, conversation_id: str, items: list[dict[str, Any]]) -> bool:
        """Add a response's input and output items to its conversation; False (and a warning)
        when the conversation is gone or the store cannot take them: the answer still goes out."""
        try:
            await self._change(conversation_id, lambda record: {**record, "items": [*record["items"], *items]})
        except HorizonError as exc:
            log.warning("response answered but not added to conversation %s: %s", conversation_id, exc.message)
            return False
        return True


__all__ = ["ConversationArchive", "ConversationCreate", "ConversationHistory", "ConversationUpdate",
           "ItemsCreate", "MAX_ITEMS_PER_CALL"]
