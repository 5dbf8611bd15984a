"""Replicas per model while a test runs, polled from the ingress's ``GET /health``."""

from __future__ import annotations

import csv
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

from .plots import ReplicaSample
from .targets import check_local_target


def replicas_from_health(body: dict[str, Any], at: float) -> list[ReplicaSample]:
    """``{"models": {alias: {"replicas": n, ...}}}`` → samples; models without a count skipped."""
    out = []
    for alias, info in (body.get("models") or {}).items():
        if isinstance(info, dict) and isinstance(info.get("replicas"), int):
            out.append(ReplicaSample(at, alias, info["replicas"]))
    return out


def _fetch_health(url: str, timeout_s: float) -> dict[str, Any]:
    # /health answers 503 while starting, still with a JSON body.
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:  # noqa: S310 — local only
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")


class ReplicaPoller:
    """Background thread sampling /health every ``interval_s`` until stopped."""

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float = 5.0,
                 fetch: Optional[Callable[[str, float], dict[str, Any]]] = None):
        self.url = check_local_target(url)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._fetch = fetch or _fetch_health
        self.samples: list[ReplicaSample] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-poller", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.time()
            try:
                self.samples.extend(replicas_from_health(self._fetch(self.url, self.timeout_s), at))
            except Exception:  # noqa: BLE001 — a missed poll is a gap in the plot, not a failure
                self.errors += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "ReplicaPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + self.interval_s)


def write_replicas_csv(samples: list[ReplicaSample], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["time", "model", "replicas"])
        for s in samples:
            w.writerow([f"{s.t:.3f}", s.model, s.replicas])


def read_replicas_csv(path: Path) -> list[ReplicaSample]:
    with path.open(encoding="utf-8") as f:
        return [ReplicaSample(float(row["time"]), row["model"], int(row["replicas"])) for row in csv.DictReader(f)]
