#!/usr/bin/env bash
# Command 2: set up everything and run all tests: the C++ unit tests (GoogleTest
# through ctest) and the Python tests (pytest) against the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate

echo "== C++ unit tests"
# setup.sh built the GoogleTest binary in the same CMake build as the extension
build_dir=$(ls -d build/cp3* | head -n 1)
set +e
ctest --test-dir "$build_dir" --output-on-failure -j2 > build/ctest.log 2>&1
cpp_status=$?
tail -n 30 build/ctest.log

echo "== Python tests"
# One pytest worker per core, at most 4 (most of a test's time is Dynamo tracing in one Python
# thread); AIRGRAPH_TEST_WORKERS=0 runs them in this process.
workers=${AIRGRAPH_TEST_WORKERS:-$(nproc)}
[ "$workers" -gt 4 ] && workers=4
xdist=()
[ "$workers" -gt 1 ] && xdist=(-n "$workers")
HF_HUB_OFFLINE=1 python -m pytest tests/python -q -rs -p no:cacheprovider "${xdist[@]}" "$@"  # -rs: every skip prints its reason
py_status=$?
set -e
if [ "$cpp_status" != 0 ] || [ "$py_status" != 0 ]; then
  echo "FAILED: ctest exit $cpp_status, pytest exit $py_status"
  exit 1
fi
