"""The spine's one-way layering, checked on every module's imports (docs/architecture.md).

api (HTTP) → serving (endpoint logic) → chat (the request pipeline) → routing / fusion /
resilience / sessions / outputs / auth / autoscaling / capacity → fleet → deployments; config,
messages, errors and the observability side channel at the bottom. A module may import its own
layer or any lower one, never a higher one; the composition root (serve_app.app, with
serve_app.app_state: the one actor that hosts the resilience layer's breaker registry and the
demand board of deployments) and the operator commands (cli, tools) may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Lower index = higher layer.
LAYERS: list[set[str]] = [
    {"serve_app", "serve_app.app", "serve_app.app_state", "serve_app.cli", "serve_app.tools"},
    {"serve_app.api"},
    {"serve_app.serving"},
    {"serve_app.chat"},
    {"serve_app.routing", "serve_app.fusion", "serve_app.resilience", "serve_app.sessions",
     "serve_app.outputs", "serve_app.auth", "serve_app.autoscaling", "serve_app.capacity"},
    {"serve_app.fleet"},
    {"deployments"},
    {"serve_app.messages", "serve_app.observability", "serve_app.errors", "serve_app.jsonutil", "serve_app.json_wire",
     "serve_app.redis_client", "serve_app.periodic", "serve_app.app_scoped",
     "serve_app.actor_link"},
    {"serve_app.config"},
]
# Within the domain layer, routing knows nothing of Fusion (it returns a decision).
FORBIDDEN = {("serve_app.routing", "serve_app.fusion")}


def unit_of(module: str) -> str | None:
    """The most specific unit ``module`` belongs to (``serve_app`` itself is only its package)."""
    units = [u for layer in LAYERS for u in layer
             if module == u or (u != "serve_app" and module.startswith(u + "."))]
    return max(units, key=len) if units else None


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
    return out


SOURCES = sorted([*(ROOT / "serve_app").rglob("*.py"), *(ROOT / "deployments").rglob("*.py")])


def test_every_module_has_a_layer():
    assert [module_name(p) for p in SOURCES if unit_of(module_name(p)) is None] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_only_go_down(path):
    here = unit_of(module_name(path))
    wrong = []
    for line, target in imports_of(path):
        there = unit_of(target)
        if there is None or there == here:
            continue
        if layer_of(there) < layer_of(here) or (here, there) in FORBIDDEN:
            wrong.append(f"line {line}: {target}")
    assert wrong == [], f"{module_name(path)} ({here}) imports upwards"
