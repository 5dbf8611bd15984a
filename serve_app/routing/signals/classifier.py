"""The LLM fallback classifier: k2 at temperature 0 answers ``{"task_type": ...}``.

Asked only when the embedding score is below threshold. The answer is constrained by the engine
(``response_format`` json_schema whose ``task_type`` is an enum of the seven labels: vLLM's
structured outputs), so even a small model answers with a label; it is still parsed with the
project's one ``extract_json``, which keeps engines without guided decoding working. A bad
answer, an error or a timeout is retried once (configurable), and after that the answer is
``unknown`` with ``settled`` false: classification never fails a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Optional

from ...fleet.protocol import ModelClient
from ...config.base import TASK_TYPES
from ...config.routing import IntentClassifierSettings
from ...errors import HorizonError
from ...jsonutil import JSONExtractionError, extract_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClassifierAnswer:
    task_type: str
    confidence: float
    latency_ms: float
    attempts: int
    # Why the answer fell back to "unknown" (last failure), else None.
    error: Optional[str] = None

    @property
    def settled(self) -> bool:
        """The classifier named a kind of request (``unknown`` settles nothing)."""
        return self.error is None and self.task_type != "unknown"


# The label constraint sent with every classification (structured outputs).
LABEL_SCHEMA = {
    "type": "object",
    "properties": {"task_type": {"type": "string", "enum": list(TASK_TYPES)},
                   "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["task_type"],
    "additionalProperties": False,
}


def _content(response: dict) -> str:
    try:
        return response["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return ""


class LLMIntentClassifier:
    def __init__(self, client: ModelClient, settings: IntentClassifierSettings, prompt: str,
                 temperature: float = 0.0):
        self._client = client
        self._settings = settings
        self._prompt = prompt
        self._temperature = temperature

    @property
    def min_safety_confidence(self) -> float:
        """Below this, a ``safety`` answer does not refuse on the classifier's word alone."""
        return self._settings.min_safety_confidence

    def _request(self, text: str) -> dict:
        request = {
            "messages": [{"role": "system", "content": self._prompt},
                         {"role": "user", "content": text}],
            "temperature": self._temperature,
            "max_tokens": self._settings.max_tokens,
            "stream": False,
        }
        if self._settings.constrained:
            request["response_format"] = {"type": "json_schema",
                                          "json_schema": {"name": "intent", "schema": LABEL_SCHEMA}}
        return request

    def _parse(self, content: str) -> tuple[str, float]:
        value = extract_json(content)
        task_type = str(value.get("task_type", "")).strip().lower()
        if task_type not in TASK_TYPES:
            raise ValueError(f"task_type {task_type!r} is not one of {list(TASK_TYPES)}")
        confidence = value.get("confidence", self._settings.default_confidence)
        try:
            confidence = min(1.0, max(0.0, float(confidence)))
        except (TypeError, ValueError):
            confidence = self._settings.default_confidence
        return task_type, confidence

    async def classify(self, text: str) -> ClassifierAnswer:
        started = time.perf_counter()
        error: Optional[str] = None
        for attempt in range(1, self._settings.attempts + 1):
            try:
                response = await asyncio.wait_for(self._client.complete(self._request(text)),
                                                  timeout=self._settings.timeout_s)
                task_type, confidence = self._parse(_content(response))
                return ClassifierAnswer(task_type, confidence,
                                        (time.perf_counter() - started) * 1000, attempt)
            except asyncio.TimeoutError:
                error = f"timed out after {self._settings.timeout_s}s"
            except (JSONExtractionError, ValueError, AttributeError) as exc:
                error = f"unparseable answer: {exc}"
            except HorizonError as exc:
                error = f"{type(exc).__name__}: {exc.message}"
            except Exception as exc:  # a broken client must not fail routing: it costs a retry
                error = f"{type(exc).__name__}: {exc}"
            log.warning("intent classifier attempt %d/%d failed: %s", attempt, self._settings.attempts, error)
        return ClassifierAnswer("unknown", 0.0, (time.perf_counter() - started) * 1000,
                                self._settings.attempts, error)
