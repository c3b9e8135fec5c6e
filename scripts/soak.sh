#!/usr/bin/env bash
# soak.sh — the soak test's long form (tests/core/test_soak.cc): 10,000 mixed
# collectives of up to 8 MiB on 8 thread ranks, every result checked, resident
# memory after the warm-up allowed to grow by 5%, no descriptor or thread leaked.
# CI runs the short form (300 calls of up to 256 KiB) in every ctest build.
#
# Usage: scripts/soak.sh [CALLS (default 10000)] [MAX_BYTES (default 8388608)]
#                        [BUILD_DIR (default build-release; built if missing)]
# About 4-5 minutes on 2 cores; resident memory reaches ~1.5 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-10000} max_bytes=${2:-8388608} dir=${3:-build-release}
if [ ! -x "$dir/tests/gccl_tests" ]; then
  scripts/install-deps.sh
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$dir" --target gccl_tests
fi
GCCL_SOAK_CALLS=$calls GCCL_SOAK_MAX_BYTES=$max_bytes "$dir/tests/gccl_tests" --gtest_filter='Soak.*'
