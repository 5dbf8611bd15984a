"""One caller's view of a record store (serve_app.sessions.stored_responses): what stored
responses (serve_app.api.response_archive) and conversations (serve_app.api.conversations)
share. A caller sees their own records (an API key's), or all of them without keys; another
key's record is as absent as one never stored."""

from __future__ import annotations

from typing import Mapping, Optional

from serve_app.auth.keys import Principal
from serve_app.config.access import SessionSettings
from serve_app.errors import HorizonError, InvalidRequest
from serve_app.sessions.ids import session_id_from_headers
from serve_app.sessions.stored_responses import Record, ResponseStore


class CallerRecords:
    """``store`` None: the profile stores none (``sessions.store_responses``). Subclasses name
    their records (``kind``, plural) and say why one is not found (``_not_found``)."""

    kind = "records"

    def __init__(self, store: Optional[ResponseStore], caller: Principal, sessions: SessionSettings):
        self.store = store
        self.owner = None if caller.anonymous else caller.name
        self.sessions = sessions

    def _mine(self, record: Optional[Record]) -> bool:
        return record is not None and record.get("owner") == self.owner

    async def _record(self, record_id: str) -> Optional[Record]:
        record = await self.store.get(record_id) if self.store is not None else None
        return record if self._mine(record) else None

    def _not_found(self, record_id: str, param: Optional[str] = None) -> HorizonError:
        raise NotImplementedError

    async def _found(self, record_id: str, param: Optional[str] = None) -> Record:
        """The caller's record, or the 404 saying why there is none (naming ``param``)."""
        record = await self._record(record_id)
        if record is None:
            raise self._not_found(record_id, param)
        return record

    def _check_history_source(self, param: str, headers: Mapping[str, str]) -> None:
        """A request may bring its earlier turns through ``param`` (previous_response_id,
        conversation): not when nothing is stored, nor beside a session, whose history would be
        forwarded too."""
        if self.store is None:
            raise InvalidRequest(f"'{param}' is not supported: this gateway stores no {self.kind} "
                                 "(sessions.store_responses is off); send the whole conversation in 'input', "
                                 "or keep it in a session (the X-Session-ID header)",
                                 param=param, code="unsupported_parameter")
        if session_id_from_headers(headers, self.sessions) is not None:
            raise InvalidRequest(f"'{param}' cannot be combined with the {self.sessions.header} header: each would "
                                 "forward its own history; use one of them", param=param, code="invalid_value")


__all__ = ["CallerRecords"]
