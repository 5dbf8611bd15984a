"""Per-request LLM timings with vLLM's benchmark definitions.

* TTFT — time to first token: request sent → first SSE chunk carrying a choice (the first
  chunk the server sends after prefill).
* ITL — inter-token latency: gaps between successive chunks carrying content or tool calls.
* TPOT — time per output token after the first: (E2EL − TTFT) / (output tokens − 1), tokens
  from the stream's ``usage`` when the server sends it, else the content chunks counted.
* E2EL — end-to-end latency: request sent → last byte of the response.

Non-streaming requests only show E2EL (and output tokens from ``usage``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Optional


class StreamError(RuntimeError):
    """The server reported an error inside the SSE stream."""


def sse_events(lines: Iterable[bytes | str]) -> Iterator[dict[str, Any]]:
    """JSON payloads of ``data:`` lines, stopping at ``[DONE]``; comments/blank lines skipped."""
    for raw in lines:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if isinstance(event, dict) and "error" in event:
            raise StreamError(str(event["error"].get("message") if isinstance(event["error"], dict)
                                  else event["error"]))
        yield event


@dataclass
class RequestRecord:
    """One request of a load test, as written (one JSON object per line) for the summary."""

    start: float                       # epoch seconds when the request was sent
    end: float                         # epoch seconds when the response finished
    category: str
    stream: bool
    fusion: bool
    requested_model: str
    status: int
    ok: bool
    decision: Optional[str] = None     # x-vsr-selected-decision
    model: Optional[str] = None        # x-vsr-selected-model
    error: Optional[str] = None
    ttft_s: Optional[float] = None
    tpot_s: Optional[float] = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0

    @property
    def e2el_s(self) -> float:
        return self.end - self.start

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "e2el_s": self.e2el_s})

    @classmethod
    def from_json(cls, line: str) -> "RequestRecord":
        data = json.loads(line)
        data.pop("e2el_s", None)
        return cls(**data)


class StreamTimer:
    """Feed it each SSE chunk with its arrival time (same clock as ``sent_at``)."""

    def __init__(self, sent_at: float):
        self.sent_at = sent_at
        self.first_at: Optional[float] = None
        self.last_token_at: Optional[float] = None
        self.itl: list[float] = []
        self.token_chunks = 0
        self.usage_tokens: Optional[int] = None

    def on_chunk(self, chunk: dict[str, Any], at: float) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        choices = chunk.get("choices") or []
        if not choices:
            return
        if self.first_at is None:
            self.first_at = at
        delta = choices[0].get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            if self.last_token_at is not None:
                self.itl.append(at - self.last_token_at)
            self.last_token_at = at
            self.token_chunks += 1

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.token_chunks

    @property
    def ttft_s(self) -> Optional[float]:
        return None if self.first_at is None else self.first_at - self.sent_at

    def tpot_s(self, finished_at: float) -> Optional[float]:
        if self.first_at is None or self.output_tokens < 2:
            return None
        return (finished_at - self.first_at) / (self.output_tokens - 1)
