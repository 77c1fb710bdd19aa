#!/usr/bin/env bash
# Sets up everything airgraph needs on a fresh Debian machine with Python 3.11:
# system packages, a virtual environment in .venv, PyTorch 2.13 (CPU), oneDNN
# from PyPI, the test and model dependencies, and airgraph itself (built by its
# own CMake through scikit-build-core). Safe to run again: it only does what is
# missing, and rebuilds airgraph incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}

need_apt=()
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
command -v ccache >/dev/null || need_apt+=(ccache)
command -v dot >/dev/null || need_apt+=(graphviz)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  $PY -m venv .venv
fi
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip, without the local index's location warnings; fails when pip fails
qpip() {
  pip "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}

if ! python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  echo "== pip install torch==2.13.0 (CPU)"
  qpip install -q torch==2.13.0
fi
echo "== pip install build and test dependencies"
qpip install -q -r requirements-dev.txt

echo "== building and installing airgraph (C++ core, extension and GoogleTest binary in build/cp*)"
export CCACHE_BASEDIR="$ROOT"
qpip install -q --no-build-isolation --no-deps -C cmake.define.AIRGRAPH_BUILD_TESTS=ON .
python -c "import airgraph, torch; print('airgraph', airgraph.__version__, 'ready:', len(airgraph.ops()), 'engine ops; torch', torch.__version__)"
