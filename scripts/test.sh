#!/usr/bin/env bash
# Command 2: set up everything and run all tests: the C++ unit tests (GoogleTest
# through ctest) and the Python tests (pytest) against the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate

echo "== C++ unit tests"
cmake -S . -B build/tests -G Ninja -DAIRGRAPH_BUILD_TESTS=ON -DAIRGRAPH_BUILD_PYTHON=OFF >/dev/null
ninja -C build/tests
set +e
ctest --test-dir build/tests --output-on-failure -j2 > build/tests/ctest.log 2>&1
cpp_status=$?
tail -n 30 build/tests/ctest.log

echo "== Python tests"
HF_HUB_OFFLINE=1 python -m pytest tests/python -q -p no:cacheprovider "$@"
py_status=$?
set -e
if [ "$cpp_status" != 0 ] || [ "$py_status" != 0 ]; then
  echo "FAILED: ctest exit $cpp_status, pytest exit $py_status"
  exit 1
fi
