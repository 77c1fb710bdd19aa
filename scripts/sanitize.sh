#!/usr/bin/env bash
# Builds the C++ core, the extension and the GoogleTest binary with AddressSanitizer
# and UndefinedBehaviorSanitizer (build/asan), then runs: every C++ test (the op plugin's
# included), and under the sanitized extension a Python smoke test (a zoo model end to end,
# the weight-change tests, the 8-thread test and the custom-op example with its plugin). Any sanitizer report fails the run.
#   ./scripts/sanitize.sh            (16 minutes on 2 cores from a fresh clone, setup included; it prints its times)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
. .venv/bin/activate
B=build/asan
echo "== configuring and building $B (ASan + UBSan)"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAIRGRAPH_SANITIZE=ON -DAIRGRAPH_BUILD_TESTS=ON -DAIRGRAPH_CROSS_BUILD_TEST=OFF \
  -DPython_EXECUTABLE="$(command -v python)" > "$B.configure.log" 2>&1 || { tail -n 30 "$B.configure.log"; exit 1; }
cmake --build "$B" -j2
t_build=$SECONDS
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== C++ tests under ASan + UBSan"
"$B/airgraph_tests" --gtest_brief=1
t_cpp=$SECONDS
echo "== Python smoke test under ASan + UBSan (sanitized extension, sanitizer runtime preloaded)"
# Python and torch are not sanitized: ASan's runtime must come first in the process, and
# leak checking is off (the interpreter keeps its allocations until exit on purpose).
# The custom-op example's plugin is built by its test with the same sanitizers (CXXFLAGS), and its
# kernel runs in this process, in airgraph-run and in a fresh Python process under them.
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
  AIRGRAPH_EXT_DIR="$B" PYTHONPATH=python HF_HUB_OFFLINE=1 \
  CXXFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g" \
  python -m pytest -q -p no:cacheprovider tests/python/test_threads.py tests/python/test_weights.py \
  tests/python/test_custom_ops.py tests/python/test_custom_op_plugin.py \
  "tests/python/test_zoo.py::test_zoo_model[bert]" "tests/python/test_zoo.py::test_zoo_model[resnet50]" "$@"
echo "sanitize: no sanitizer reports; build $t_build s, C++ tests $((t_cpp - t_build)) s, Python smoke test $((SECONDS - t_cpp)) s, total $SECONDS s"
