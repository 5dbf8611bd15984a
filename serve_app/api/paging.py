"""OpenAI's cursor-paged lists of items (a stored response's input items, a conversation's
items): ``limit`` 1-100 (default 20), ``order`` ``desc`` (default) or ``asc``, ``after`` /
``before`` an item id of the list; a bad one is a 400 naming it."""

from __future__ import annotations

from typing import Any, Mapping

from serve_app.errors import InvalidRequest


def item_page(items: list[dict[str, Any]], query: Mapping[str, str], *, of: str) -> dict[str, Any]:
    """One page of ``items`` (oldest first) as OpenAI's list object; ``of`` names their owner
    in errors (``response 'resp_1'``)."""
    limit, order = query.get("limit", "20"), query.get("order", "desc")
    if not limit.isdigit() or not 1 <= int(limit) <= 100:
        raise InvalidRequest(f"'limit' must be an integer from 1 to 100, got {limit!r}", param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"'order' must be 'asc' or 'desc', got {order!r}", param="order")
    items = list(reversed(items)) if order == "desc" else list(items)
    start, end = 0, len(items)
    for cursor in ("after", "before"):
        value = query.get(cursor)
        if value is None:
            continue
        position = next((i for i, item in enumerate(items) if item.get("id") == value), None)
        if position is None:
            raise InvalidRequest(f"'{cursor}' is not an item of {of}: {value!r}", param=cursor)
        if cursor == "after":
            start = max(start, position + 1)
        else:
            end = min(end, position)
    # A page counts from the cursor: after X, the items following it; before X, those just before.
    window = items[start:end]
    page = window[-int(limit):] if "before" in query and "after" not in query else window[:int(limit)]
    return {"object": "list", "data": page, "first_id": page[0].get("id") if page else None,
            "last_id": page[-1].get("id") if page else None, "has_more": len(window) > len(page)}


__all__ = ["item_page"]
