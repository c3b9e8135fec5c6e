#!/usr/bin/env bash
# The main job: build gccl, run gccl-bench allreduce on 4 thread ranks (dense), then
# the compressed allreduce on 8 thread ranks as 8 virtual nodes joined by a
# simulated 1 Gbit/s network, each codec against the fastest dense algorithm.
# Usage: scripts/bench.sh [extra gccl-bench arguments for the dense run]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench-only
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGCCL_BUILD_TESTS=OFF >/dev/null
cmake --build build --target gccl-bench
build/bench/gccl-bench allreduce -r 4 -b 8 -e 128M -f 4 -d float -o sum -n 20 -w 5 -c 1 "$@"
build/bench/gccl-bench allreduce -r 8 --ranks-per-node 1 --link-gbps 1 --link-us 20 --dense-best -b 16M -e 16M \
  -n 5 -w 1 -z --codec "fp16 uniform:bits=8 uniform:bits=4 sign topk:ratio=0.01 randk:ratio=0.01"
