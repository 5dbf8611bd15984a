"""Shared builders for the cluster tests: the fleet profile as a mutable document."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import yaml

from serve_app.capacity.facts import load_model_facts
from serve_app.config.loader import parse_config
from serve_app.config.schema import HorizonConfig

ROOT = Path(__file__).resolve().parents[3]
FLEET = ROOT / "configs" / "fleet.yaml"
FACTS = load_model_facts(ROOT / "cluster" / "model_facts.yaml")
_FLEET_DOC = yaml.safe_load(FLEET.read_text(encoding="utf-8"))


def fleet_document() -> dict[str, Any]:
    return copy.deepcopy(_FLEET_DOC)


def fleet_args(document: dict[str, Any]) -> dict[str, Any]:
    return document["applications"][0]["args"]


def model_entry(document: dict[str, Any], alias: str) -> dict[str, Any]:
    return next(m for m in fleet_args(document)["models"] if m["alias"] == alias)


def node_entry(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in fleet_args(document)["cluster"]["node_types"] if n["name"] == name)


def fleet_with(edit: Callable[[dict[str, Any]], None]) -> HorizonConfig:
    """The fleet profile after ``edit`` changed its document."""
    document = fleet_document()
    edit(document)
    return parse_config(document, source="fleet(edited)")


def fleet() -> HorizonConfig:
    return parse_config(fleet_document(), source=str(FLEET))
