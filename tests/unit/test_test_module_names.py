"""Test modules are imported by basename (rootdir-relative, no packages), so two with the same
file name in different folders stop the whole run at collection ("import file mismatch"). The
split test command runs tests/unit and tests/e2e in one pytest process, so a clash shows only
there; this catches it in any run."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_its_own_file_name():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
