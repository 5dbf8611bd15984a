"""No module uses a name it never defines or imports (pyflakes' undefined-name checks).

Such a name fails only when its line runs, and error paths run rarely: the simulated backend's
text completion raised a NameError on every failed handle call until this check found it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyflakes import messages
from pyflakes.api import checkPath
from pyflakes.reporter import Reporter

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["serve_app", "deployments", "loadtests", "scripts", "tests"]
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(Reporter):
    def __init__(self):
        self.found: list[str] = []
        self.syntax: list[str] = []

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text):  # noqa: N802 - pyflakes' API
        self.syntax.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):  # noqa: N802
        self.syntax.append(f"{filename}: {msg}")


def python_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_the_check_sees_the_code_and_catches_an_undefined_name(tmp_path):
    assert len(python_files()) > 200
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return map_ray_error(1)\n")
    reporter = _Collect()
    checkPath(str(bad), reporter)
    assert reporter.found and "map_ray_error" in reporter.found[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_undefined_names(package):
    reporter = _Collect()
    for path in sorted((ROOT / package).rglob("*.py")):
        checkPath(str(path), reporter)
    assert not reporter.syntax, reporter.syntax
    assert not reporter.found, "\n".join(reporter.found)
