"""Pydantic schema of a K2 Horizon profile: the root and the checks that span domains.

A profile is one YAML file under ``configs/``. It is a Ray Serve config file whose single
application's ``args`` hold the Horizon settings validated here, so ``serve run configs/X.yaml``
and ``horizon`` commands read the very same file. Every model forbids unknown keys: an
operator's typo must fail at load with the path of the key, never be silently ignored.

Each domain's sections live in their own module (``models``, ``routing``, ``fusion``,
``resilience``, ``access``, ``observability``, ``cluster``, ``gateway``); closed vocabularies in
``base``. Key names follow vLLM Semantic Router where the concepts overlap (``global.router``,
``routing.decisions[]`` with ``rules``/``modelRefs``/``algorithm``).

This package imports nothing else of the project: everyone imports it.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from .access import AuthSettings, SessionSettings
from .base import PathError, Strict
from .cluster import ClusterSettings
from .gateway import GlobalSettings, SimulationSettings, VisionSettings
from .models import ModelSettings, ToolCallingSettings, UnavailableModel
from .observability import ObservabilitySettings
from .resilience import ResilienceSettings
from .routing import Decision, RoutingSettings

# The tools a simulated engine without a ``tool_calling`` section honours: one instance, read
# per request like every parsed section (not built anew for each request that asks).
_SIMULATED_TOOL_CALLING = ToolCallingSettings()


class HorizonConfig(Strict):
    """A whole profile (the ``args`` of the Ray Serve application)."""

    profile: str = Field(..., min_length=1)
    description: str = ""
    global_: GlobalSettings = Field(default_factory=GlobalSettings, alias="global")
    models: list[ModelSettings] = Field(..., min_length=1)
    unavailable_models: list[UnavailableModel] = Field(default_factory=list)
    simulation: SimulationSettings = Field(default_factory=SimulationSettings)
    routing: RoutingSettings
    resilience: ResilienceSettings = Field(default_factory=ResilienceSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    # The GPU cluster (node types) a production profile is placed on; None on CPU profiles.
    cluster: Optional[ClusterSettings] = None
    vision: VisionSettings = Field(default_factory=VisionSettings)

    @model_validator(mode="after")
    def _vision_limit_within_engine(self) -> "HorizonConfig":
        """An image count the ingress admits must not be one the vision engine then rejects."""
        for i, m in enumerate(self.models):
            limit = (m.engine.limit_mm_per_prompt or {}).get("image")
            if m.role == "vision" and limit is not None and self.vision.max_images_per_request > limit:
                raise PathError("vision.max_images_per_request",
                                 f"{self.vision.max_images_per_request} exceeds models[{i}] ({m.alias}) "
                                 f"engine.limit_mm_per_prompt.image = {limit}")
        return self

    @model_validator(mode="after")
    def _auth_redis_url_defaults_to_sessions(self) -> "HorizonConfig":
        if self.auth.redis_url is None:
            self.auth.redis_url = self.sessions.redis_url
        return self

    @model_validator(mode="after")
    def _shared_state_across_ingress_replicas(self) -> "HorizonConfig":
        """Several ingress replicas need their sessions and rate limits in Redis.

        Refused rather than warned about: with in-process stores the profile *runs*, but a
        conversation loses its history whenever a turn lands on another replica and a key's
        limit silently multiplies by the replica count; nobody reads a start-up warning in time.
        """
        replicas = self.global_.server.max_replicas
        if replicas <= 1:
            return self
        local = "a local Redis: bash scripts/redis.sh start 6399"
        if self.sessions.enabled and self.sessions.backend == "inprocess":
            raise PathError("sessions.backend",
                            f"global.server.max_replicas is {replicas} but sessions are in-process: a "
                            "conversation's turns would land on different ingress replicas and lose their "
                            f"history. Set sessions.backend: redis ({local}), sessions.enabled: false, or "
                            "global.server.max_replicas: 1")
        limited = any(k.requests_per_minute is not None for k in self.auth.keys)
        if self.auth.enabled and limited and self.auth.rate_limit_store == "inprocess":
            raise PathError("auth.rate_limit_store",
                            f"global.server.max_replicas is {replicas} but rate limits are in-process: each "
                            f"key could send up to {replicas} times its limit. Set auth.rate_limit_store: "
                            f"redis ({local}) or global.server.max_replicas: 1")
        return self

    @model_validator(mode="after")
    def _auth_references(self) -> "HorizonConfig":
        """Key permissions must name real models and decisions: a typo would lock a client out."""
        known_models = {m.alias for m in self.models} | {u.alias for u in self.unavailable_models}
        # fusion_direct is the request-scoped decision a plugins override builds (SPEC §3).
        known_decisions = {d.name for d in self.routing.decisions} | {"fusion_direct"}
        for i, key in enumerate(self.auth.keys):
            for j, alias in enumerate(key.allowed_models or []):
                if alias not in known_models:
                    raise PathError(f"auth.keys[{i}].allowed_models[{j}]", f"unknown model {alias!r}")
            for j, name in enumerate(key.allowed_decisions or []):
                if name not in known_decisions:
                    raise PathError(f"auth.keys[{i}].allowed_decisions[{j}]",
                                     f"unknown decision {name!r}")
        return self

    # ------------------------------------------------------------------ lookups
    def model(self, alias: str) -> ModelSettings:
        for m in self.models:
            if m.alias == alias:
                return m
        raise KeyError(alias)

    def context_limit(self, alias: str) -> int:
        """Tokens the model can hold: its ``engine.max_model_len``, and no more than the engine
        it shares when another alias's deployment serves it (the CPU profile's tiny model)."""
        model = self.model(alias)
        limit = model.engine.max_model_len
        if model.shares_engine_with:
            limit = min(limit, self.model(model.shares_engine_with).engine.max_model_len)
        return limit

    def engine_owner(self, alias: str) -> ModelSettings:
        """The model whose engine serves ``alias`` (itself unless it shares another's)."""
        model = self.model(alias)
        return self.model(model.shares_engine_with) if model.shares_engine_with else model

    def tool_calling(self, alias: str) -> Optional[ToolCallingSettings]:
        """Tool calling of the engine serving ``alias``; None = no tool support. A simulated
        engine without the section honours tools with the defaults."""
        owner = self.engine_owner(alias)
        if owner.tool_calling is not None:
            return owner.tool_calling
        return _SIMULATED_TOOL_CALLING if owner.backend == "simulated" else None

    @property
    def aliases(self) -> list[str]:
        return [m.alias for m in self.models]

    @property
    def embedding_aliases(self) -> set[str]:
        return {m.alias for m in self.models if m.role == "embedding"}

    def _chat_model_problem(self, alias: str) -> Optional[str]:
        """Why ``alias`` cannot take a chat role (decision, fallback hop, classifier, Fusion
        judge or panel member): an embedding model answers no chat request."""
        return f"{alias!r} is an embedding model, not a chat model" if alias in self.embedding_aliases else None

    def _answer_room_problem(self, tokens: Optional[int], alias: str) -> Optional[str]:
        """Why an answer length configured for ``alias`` can never be served: at or past the
        model's window (the engine it shares included) it leaves no room for a prompt, so the
        engine refuses every request it is added to, whatever the client sends."""
        window = self.context_limit(alias)
        if tokens is None or tokens < window:
            return None
        owner = self.model(alias).shares_engine_with
        shared = f" (the engine of {owner!r} it shares)" if owner else ""
        return f"{tokens} tokens of answer leave no room for a prompt in the {window}-token window of {alias!r}{shared}"

    @property
    def embedding_model(self) -> Optional[ModelSettings]:
        return next((m for m in self.models if m.backend == "embedding"), None)

    def decision(self, name: str) -> Decision:
        for d in self.routing.decisions:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def fusion_slugs(self) -> list[str]:
        return self.global_.integrations.looper.fusion.model_names

    @property
    def auto_slugs(self) -> list[str]:
        return self.global_.router.auto_model_names

    # ------------------------------------------------------------------ cross-checks
    @model_validator(mode="after")
    def _cross_references(self) -> "HorizonConfig":
        aliases = [m.alias for m in self.models]
        dupes = sorted({a for a in aliases if aliases.count(a) > 1})
        if dupes:
            raise ValueError(f"models: duplicate aliases {dupes}")
        known = set(aliases) | {u.alias for u in self.unavailable_models}
        slugs = set(self.fusion_slugs) | set(self.auto_slugs)
        clash = sorted(slugs & known)
        if clash:
            raise ValueError(f"global: routing slugs {clash} collide with model aliases")
        both = sorted(set(self.fusion_slugs) & set(self.auto_slugs))
        if both:  # one request model value cannot ask for full routing and for Fusion alone
            raise PathError("global.router.auto_model_names",
                            f"{both} also in global.integrations.looper.fusion.model_names")
        for i, m in enumerate(self.models):
            if m.shares_engine_with is not None:
                if m.shares_engine_with not in aliases or m.shares_engine_with == m.alias:
                    raise PathError(f"models[{i}].shares_engine_with",
                                     f"unknown model {m.shares_engine_with!r}")
                owner = self.model(m.shares_engine_with)
                if owner.shares_engine_with is not None:
                    raise PathError(f"models[{i}].shares_engine_with",
                                     "must name a model that owns its engine")
        for i, m in enumerate(self.models):
            # The default answer length is added to every request that sets none: each of those
            # would be a 400 telling the client to lower a max_tokens it never sent.
            problem = self._answer_room_problem(m.sampling.max_tokens, m.alias)
            if problem:
                raise PathError(f"models[{i}].sampling.max_tokens", problem)
        for i, d in enumerate(self.routing.decisions):
            for j, ref in enumerate(d.model_refs):
                if ref.model in slugs:
                    raise PathError(f"routing.decisions[{i}].modelRefs[{j}].model",
                                     f"{ref.model!r} is a routing slug, not a model (no recursive Fusion)")
                if ref.model not in known:
                    raise PathError(f"routing.decisions[{i}].modelRefs[{j}].model",
                                     f"unknown model {ref.model!r}")
                problem = self._chat_model_problem(ref.model)
                if problem:
                    raise PathError(f"routing.decisions[{i}].modelRefs[{j}].model", problem)
        classifier = self.routing.signals.intent.classifier
        if classifier.enabled and classifier.model not in known:
            raise PathError("routing.signals.intent.classifier.model", f"unknown model {classifier.model!r}")
        if classifier.enabled and self._chat_model_problem(classifier.model):
            raise PathError("routing.signals.intent.classifier.model", self._chat_model_problem(classifier.model))
        for task, chain in self.resilience.fallback_chains.items():
            for j, alias in enumerate(chain):
                if alias not in known:
                    raise PathError(f"resilience.fallback_chains.{task}[{j}]", f"unknown model {alias!r}")
                problem = self._chat_model_problem(alias)
                if problem:
                    raise PathError(f"resilience.fallback_chains.{task}[{j}]", problem)
        for alias in self.resilience.admission:
            if alias not in known:
                raise PathError(f"resilience.admission.{alias}", f"unknown model {alias!r}")
        for i, rule in enumerate(self.resilience.degrade):
            for key in ("model", "target"):
                if getattr(rule, key) not in known:
                    raise PathError(f"resilience.degrade[{i}].{key}",
                                     f"unknown model {getattr(rule, key)!r}")
        return self

    @model_validator(mode="after")
    def _scaling_sees_the_admission_line(self) -> "HorizonConfig":
        """Ray's ongoing-requests policy counts only what reaches the replicas: an admission
        capacity at or below its target holds the whole backlog in the ingress, out of its sight,
        and the model never scales (the queue-depth policy reads that line; docs/autoscaling.md)."""
        for alias, admission in self.resilience.admission.items():
            if admission.capacity is None or alias not in self.aliases:
                continue
            s = self.model(alias).scaling
            if s.autoscaling and s.policy == "ongoing_requests" and admission.capacity <= s.target_ongoing_requests:
                raise PathError(f"resilience.admission.{alias}.capacity",
                                f"{admission.capacity} requests per replica never exceed the model's "
                                f"scaling.target_ongoing_requests ({s.target_ongoing_requests:g}), so Ray's "
                                "ongoing-requests policy would never add a replica: it does not see the "
                                "ingress's line. Use scaling.policy: queue_depth (which does), or a capacity "
                                "above the target")
        return self

    @model_validator(mode="after")
    def _fusion_slugs(self) -> "HorizonConfig":
        """Fusion judges and panels name served fleet models, never a routing slug."""
        slugs = set(self.fusion_slugs) | set(self.auto_slugs)
        known = {m.alias for m in self.models} | {u.alias for u in self.unavailable_models}
        served = set(self.aliases)
        for i, d in enumerate(self.routing.decisions):
            params = d.algorithm.fusion
            if params is None:
                continue
            base = f"routing.decisions[{i}].algorithm.fusion"
            panel = params.effective_panel([r.model for r in d.model_refs])
            limit = self.global_.integrations.looper.fusion.max_panel_size
            if len(panel) > limit:
                where = f"{base}.analysis_models" if params.analysis_models else f"routing.decisions[{i}].modelRefs"
                raise PathError(where, f"a panel of {len(panel)} models exceeds "
                                       f"global.integrations.looper.fusion.max_panel_size ({limit})")
            named = [("model", params.model)] if params.model is not None else []
            named += [(f"analysis_models[{j}]", m) for j, m in enumerate(params.analysis_models or [])]
            for key, alias in named:
                if alias in slugs:
                    raise PathError(f"{base}.{key}",
                                     f"{alias!r} is a routing slug; a Fusion slug can never be a "
                                     "judge or panel model (no recursive Fusion)")
                if alias not in known:
                    raise PathError(f"{base}.{key}", f"unknown model {alias!r}")
                problem = self._chat_model_problem(alias)
                if problem:
                    raise PathError(f"{base}.{key}", problem)
            # A Fusion answer length is sent to every panel member and the judge (the panel's
            # 400s, or the judge's); an override's to its member only.
            judge = params.model or panel[0]
            lengths = [(f"{base}.max_completion_tokens", params.max_completion_tokens, [*panel, judge])]
            lengths += [(f"{base}.analysis_overrides[{j}].max_completion_tokens", o.max_completion_tokens, [o.model])
                        for j, o in enumerate(params.analysis_overrides)]
            for where, tokens, readers in lengths:
                for alias in readers:
                    problem = self._answer_room_problem(tokens, alias) if alias in served else None
                    if problem:
                        raise PathError(where, problem)
            if params.grounding.enabled and not self.embedding_aliases:
                raise PathError(f"{base}.grounding.enabled",
                                 "grounding needs an embedding model (backend: embedding) in models")
        return self

    @model_validator(mode="after")
    def _tool_requests_reach_tool_models(self) -> "HorizonConfig":
        """A decision that routes requests carrying ``tools`` must route them to models with
        tool calling: its primary model, the models of its task type's fallback chain (a hop
        carries the tools along) and, for Fusion, the judge (only its synthesis gets the tools;
        panel calls are text-only). Models this profile does not serve are skipped: requests
        to them fail before any call anyway."""
        served = {m.alias for m in self.models if m.role != "embedding"}
        rule = ("a decision routes requests with tools unless it refuses or sets "
                "tool_requests: refuse")
        for i, d in enumerate(self.routing.decisions):
            if not d.routes_tool_requests:
                continue
            base = f"routing.decisions[{i}]"
            reached: list[tuple[str, str, str]] = []
            params = d.algorithm.fusion if d.algorithm.type == "fusion" else None
            if params is not None:
                panel = params.effective_panel([r.model for r in d.model_refs])
                where = f"{base}.algorithm.fusion.model" if params.model else f"{base}.modelRefs[0].model"
                reached.append((where, params.model or panel[0], "its Fusion judge"))
            else:
                reached.append((f"{base}.modelRefs[0].model", d.model_refs[0].model, "its model"))
                chain = self.resilience.fallback_chains.get(d.task_type or "", [])
                reached += [(f"resilience.fallback_chains.{d.task_type}[{j}]", alias,
                             f"its task type's fallback chain ({d.task_type})")
                            for j, alias in enumerate(chain)]
            for path, alias, what in reached:
                if alias in served and self.tool_calling(alias) is None:
                    owner = self.engine_owner(alias).alias
                    section = f"models[{self.aliases.index(owner)}].tool_calling"
                    raise PathError(path, f"decision {d.name!r} routes requests with tools to {alias!r} "
                                          f"({what}), which has no tool calling: add {section} "
                                          f"(the engine of {owner!r}) or set tool_requests: refuse on "
                                          f"the decision ({rule})")
        return self
