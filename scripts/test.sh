#!/usr/bin/env bash
# Every test: a Release build, an ASan+UBSan build and a TSan build, each under
# ctest, plus an install check (find_package and pkg-config) and a minute of
# fuzzing. Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

build_and_test() { # name, cmake args...
  local dir=build-$1; shift
  echo "=== $dir"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" ${CTEST_ARGS:-})
}

build_and_test release -DCMAKE_BUILD_TYPE=Release
build_and_test asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGCCL_SANITIZE=address -DGCCL_BUILD_BENCH=OFF
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  build_and_test tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGCCL_SANITIZE=thread -DGCCL_BUILD_BENCH=OFF

scripts/check-install.sh build-release

# libFuzzer on gcclDecodeAccumulate for a minute (clang, ASan+UBSan).
echo "=== fuzz"
scripts/fuzz.sh "${GCCL_FUZZ_SECONDS:-60}" build-fuzz
