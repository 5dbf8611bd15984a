"""Live settings: the part of a profile the ingress can change without restarting anything.

Ray Serve versions every deployment of an application by a hash of the application's
``import_path``, ``runtime_env`` and ``args``: any change of a profile's settings (they are the
``args``) restarts every replica, the engines included. A new routing threshold must not reload a
70B model, so the routing settings can also be given as the ingress deployment's ``user_config``
(``applications[0].deployments: [{name: ingress, user_config: {routing: ...}}]``).
Serve hands a changed ``user_config`` to the running ingress replicas (``reconfigure``) and
leaves the engines alone.

The overrides are merged into the profile's ``args`` (mappings key by key; a list or a value
replaces the profile's) and the merged profile is validated whole, so a decision that names an
unknown model or an API key that names a removed decision fails as it would in ``args``.
Only ``routing`` is live: every other section shapes deployments, placement or state that is
built once per replica.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .loader import ConfigError, horizon_args, parse_config
from .schema import HorizonConfig

LIVE_SECTIONS = ("routing",)
# The name of the Serve deployment that takes them, the ingress; serve_app.fleet.names exports
# it as INGRESS_DEPLOYMENT (this layer imports nothing above it).
INGRESS = "ingress"


def merge_settings(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` on top: mappings merge key by key, anything else replaces."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_settings(merged[key], value)
        else:
            merged[key] = value
    return merged


def live_config(args: Mapping[str, Any], overrides: Optional[Any], source: str) -> HorizonConfig:
    """The profile ``args`` with the ingress's ``user_config`` ``overrides`` applied and checked.
    Raises :class:`ConfigError` naming the key (relative to the ``user_config``)."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(source, [("", "expected a mapping of profile sections "
                                        f"({', '.join(LIVE_SECTIONS)})")])
    wrong = [(str(key), f"cannot change without a restart; only {', '.join(LIVE_SECTIONS)} can "
              "(set it in the profile's args)") for key in overrides if key not in LIVE_SECTIONS]
    if wrong:
        raise ConfigError(source, wrong)
    return parse_config(merge_settings(horizon_args(args), overrides), source=source)


def ingress_user_config(document: Mapping[str, Any]) -> tuple[Optional[str], Any]:
    """(path, value) of the ingress's ``user_config`` in a Serve config document; (None, None)
    when it has none (or is a bare args mapping)."""
    apps = document.get("applications") if isinstance(document, Mapping) else None
    if not apps or not isinstance(apps[0], Mapping):
        return None, None
    for i, entry in enumerate(apps[0].get("deployments") or []):
        if isinstance(entry, Mapping) and entry.get("name") == INGRESS and "user_config" in entry:
            return f"applications[0].deployments[{i}].user_config", entry["user_config"]
    return None, None


def effective_config(document: Mapping[str, Any], source: str) -> HorizonConfig:
    """What a profile file serves: its ``args`` with the ingress's live settings applied. The
    offline tools (``horizon route``, calibration, training, the smoke test, the planner) read
    this, so they see the routing a deployment of the file runs."""
    cfg = parse_config(document, source=source)
    path, overrides = ingress_user_config(document)
    if path is None:
        return cfg
    return live_config(horizon_args(document), overrides, source=f"{source} ({path})")
