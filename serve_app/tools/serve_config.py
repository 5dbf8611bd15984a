"""The Ray Serve config around a profile's args, checked before anything starts.

Every profile is a Serve config file: ``horizon serve`` hands the whole file to Serve's
controller, as ``serve deploy`` does. Three things in that envelope go wrong without an error
from Serve, so ``horizon validate``, ``horizon serve``, ``horizon plan`` and ``horizon kuberay``
(whose manifest carries the file to a cluster) refuse them, naming the key:

* **A key Serve does not know** (``num_replicass``, ``http_options.prot``): Serve's schema ignores
  it, and the setting the operator meant never applies.
* **A ``deployments:`` override of an option the profile sets.** Serve applies an application's
  ``deployments:`` entries on top of what the builder gave each deployment and replaces an
  option whole: an ``autoscaling_config`` override swaps the queue-depth policy (and its slots
  and delays) for Ray's default policy, a ``ray_actor_options`` one drops the CPUs and GPUs the
  machine fit counted. Those options are changed in the profile's own keys instead; the error
  names the one. Options the profile leaves to Serve (health checks, graceful shutdown) pass
  through. An override of a deployment the profile does not build is named here too (Serve
  would only fail the deploy: ``Deployment 'x' does not exist``).
* **Invalid live settings**: the ingress's ``user_config`` (serve_app.config.live), merged into
  the profile and validated whole. A running ingress keeps its settings rather than fail on them
  (``/health`` says so), so this is where they are refused.

And one thing inside the profile that only the ingress would find, too late: **routing data
files** (intent templates, the classifier prompt, the intent head) that are missing, malformed or
stale. The ingress would wait for them forever ("gateway starting — RoutingDataError"); the
same loaders run here (:func:`serve_app.routing.signals.intent.data_problems`), and in
``build_app`` for ``serve run``.

``serve deploy`` and ``serve run`` do not run the envelope checks: Serve's CLI has no hook for them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from pydantic import BaseModel, ValidationError
from ray.serve.schema import (DeploymentSchema, HTTPOptionsSchema, ServeApplicationSchema,
                              ServeDeploySchema)

from serve_app.config.live import live_config
from serve_app.config.loader import ConfigError, format_loc, horizon_args, parse_config, read_document, serve_http
from serve_app.config.schema import HorizonConfig
from serve_app.fleet.backends import engine_problems
from serve_app.fleet.names import INGRESS_DEPLOYMENT, deployment_name
from serve_app.routing.signals.intent import data_problems

# Options K2 Horizon sets on a model deployment, and the part of ``models[i]`` that sets them.
MODEL_OPTIONS: dict[str, str] = {
    "num_replicas": "scaling",
    "autoscaling_config": "scaling",
    "max_ongoing_requests": "scaling",
    "max_queued_requests": "scaling",
    "max_surge_percent": "scaling",
    "ray_actor_options": "placement",
    "placement_group_bundles": "placement",
    "placement_group_strategy": "placement",
    # The simulated and embedding engines' settings (and ray.serve.llm's own).
    "user_config": "",
}
# Options K2 Horizon sets on the ingress, from ``global.server``.
INGRESS_OPTIONS = ("num_replicas", "autoscaling_config", "max_ongoing_requests", "max_surge_percent",
                   "ray_actor_options")
# The ingress option an operator sets: its live settings (serve_app.config.live), checked here.
INGRESS_LIVE_OPTION = "user_config"
# Why an override of the rest is refused too.
_READ_FROM_PROFILE = "the machine fit, the planner and the gateway read the profile's value"


def _keys(model: type[BaseModel]) -> set[str]:
    keys = set(model.model_fields)
    keys.update(f.alias for f in model.model_fields.values() if f.alias)
    return keys


def _unknown(section: Any, model: type[BaseModel], path: str) -> list[tuple[str, str]]:
    if not isinstance(section, Mapping):
        return []
    known = _keys(model)
    return [(f"{path}.{key}" if path else str(key), f"unknown key (Ray Serve's {model.__name__} has no such "
             "option and would ignore it)") for key in section if key not in known]


def deployment_names(cfg: HorizonConfig) -> list[str]:
    """The Serve deployments the profile's application consists of."""
    return [INGRESS_DEPLOYMENT] + [deployment_name(m.alias) for m in cfg.models if m.shares_engine_with is None]


def _override_problems(entry: Mapping[str, Any], path: str, cfg: HorizonConfig) -> list[tuple[str, str]]:
    name = entry.get("name")
    if name == INGRESS_DEPLOYMENT:
        return [(f"{path}.{key}", f"K2 Horizon sets this for the ingress from global.server; change "
                 f"it there ({_READ_FROM_PROFILE})") for key in entry if key in INGRESS_OPTIONS]
    by_name = {deployment_name(m.alias): (i, m) for i, m in enumerate(cfg.models) if m.shares_engine_with is None}
    if name not in by_name:
        return [(f"{path}.name", f"no deployment {name!r} in this profile (its deployments: "
                 f"{', '.join(deployment_names(cfg))})")]
    index, _model = by_name[name]
    problems = []
    for key in entry:
        if key not in MODEL_OPTIONS:
            continue
        where = f"models[{index}].{MODEL_OPTIONS[key]}" if MODEL_OPTIONS[key] else f"models[{index}]"
        why = ("Serve replaces the whole autoscaling_config, so this would swap the queue-depth "
               "policy for Ray's default" if key == "autoscaling_config" else _READ_FROM_PROFILE)
        problems.append((f"{path}.{key}", f"K2 Horizon sets this for {name} from {where}; change it "
                         f"there ({why})"))
    return problems


def _live(overrides: Any, path: str, args: Mapping[str, Any]) -> tuple[Optional[HorizonConfig], list[tuple[str, str]]]:
    """The ingress's live settings (serve_app.config.live) merged into the profile: the profile
    they make, or the problems. Checked here because the running ingress cannot refuse them: it
    keeps its settings and says so on /health."""
    try:
        return live_config(args, overrides, source=path), []
    except ConfigError as exc:
        return None, [(f"{path}.{key}" if key else path, message) for key, message in exc.errors]


def _checked(document: Mapping[str, Any], cfg: HorizonConfig) -> tuple[list[tuple[str, str]], HorizonConfig]:
    """The problems of the Serve config around ``cfg``, and the profile it serves (``cfg`` with
    the ingress's live settings applied; ``cfg`` itself when it has none or they fail)."""
    if "applications" not in document:
        return file_problems(cfg), cfg
    try:
        ServeDeploySchema.model_validate(dict(document))
    except ValidationError as exc:
        return [(format_loc(tuple(err.get("loc", ()))), err.get("msg", "invalid")) for err in exc.errors()], cfg
    problems = _unknown(document, ServeDeploySchema, "")
    try:
        serve_http(document)
    except ConfigError as exc:
        problems += exc.errors
    problems += _unknown(document.get("http_options"), HTTPOptionsSchema, "http_options")
    app = document["applications"][0]
    problems += _unknown(app, ServeApplicationSchema, "applications[0]")
    served = cfg
    for i, entry in enumerate(app.get("deployments") or []):
        path = f"applications[0].deployments[{i}]"
        problems += _unknown(entry, DeploymentSchema, path)
        problems += _override_problems(entry, path, cfg)
        if entry.get("name") == INGRESS_DEPLOYMENT and INGRESS_LIVE_OPTION in entry:
            live, wrong = _live(entry[INGRESS_LIVE_OPTION], f"{path}.{INGRESS_LIVE_OPTION}", horizon_args(document))
            problems += wrong
            served = live or served
    return problems + file_problems(served), served


def file_problems(cfg: HorizonConfig) -> list[tuple[str, str]]:
    """(key, problem) for what a profile names that its deployments would fail on at start:
    routing data files the ingress could not read (it would wait for them forever) and engine
    settings a model's deployment refuses a minute in. Checked by every command that loads a
    profile and by the app builder (``serve run``)."""
    return data_problems(cfg) + engine_problems(cfg)


def serve_config_problems(document: Mapping[str, Any], cfg: HorizonConfig) -> list[tuple[str, str]]:
    """(path, message) for each problem of the Serve config around ``cfg`` (empty: none). A
    bare args mapping (no ``applications`` key) has no envelope to check."""
    return _checked(document, cfg)[0]


def check_serve_config(document: Mapping[str, Any], cfg: HorizonConfig, source: str) -> None:
    """Raise :class:`ConfigError` naming every problem :func:`serve_config_problems` finds."""
    problems = serve_config_problems(document, cfg)
    if problems:
        raise ConfigError(source, problems)


def read_serve_profile(path: str) -> tuple[dict[str, Any], HorizonConfig]:
    """A profile file's document and what it serves (its args with the ingress's live
    settings), with the Serve config around them checked too. The profile is parsed once, and
    once more with live settings."""
    document = read_document(path)
    cfg = parse_config(document, source=str(path))
    problems, served = _checked(document, cfg)
    if problems:
        raise ConfigError(str(path), problems)
    return document, served


def load_serve_profile(path: str) -> HorizonConfig:
    """What a profile serves, checked as :func:`read_serve_profile` checks it."""
    return read_serve_profile(path)[1]
