#!/usr/bin/env bash
# The main job: build gccl and run gccl-bench allreduce on 4 thread ranks.
# Usage: scripts/bench.sh [extra gccl-bench arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench-only
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGCCL_BUILD_TESTS=OFF >/dev/null
cmake --build build --target gccl-bench
build/bench/gccl-bench allreduce -r 4 -b 8 -e 128M -f 4 -d float -o sum -n 20 -w 5 -c 1 "$@"
