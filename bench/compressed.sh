#!/usr/bin/env bash
# The compressed-allreduce measurements of BENCHMARKS.md ("Compressed collectives"):
# 100 MiB float32 sum on 8 thread ranks under the link model, every codec against
# the fastest dense algorithm of the same run (--dense-best), times simulated.
#   1. 8 virtual nodes at 1 Gbit/s (the issue's bars) and at 10 Gbit/s, median of 5;
#   2. the same at 2.5, 5, 25 and 40 Gbit/s (one timing each), for the break-even
#      link rate of every codec (bench/plot.py interpolates it);
#   3. 2 nodes x 4 ranks at 1 Gbit/s: hierarchical compressed (the tuner's choice)
#      against flat compressed (forced), median of 5;
#   4. sizes 64 KiB to 64 MiB at 1 Gbit/s (busbw against size, plot.py).
# Usage: bench/compressed.sh BUILD_DIR OUT_DIR     (about 25 minutes on 2 cores)
set -euo pipefail
build=${1:?build directory} out=${2:?output directory}
bench=$build/bench/gccl-bench
mkdir -p "$out"
codecs="fp16 bf16 uniform:bits=8 uniform:bits=4 qsgd:bits=4 sign terngrad topk:ratio=0.01 topk:ratio=0.01,global=1 randk:ratio=0.01"
common=(allreduce -r 8 -b 100M -e 100M -n 5 -w 1 -z --link-us 20)

run() { # name, gccl-bench arguments...
  local name=$1; shift
  echo "=== $name: $bench $*"
  "$bench" "$@" -J "$out/$name.json" | tee "$out/$name.txt" | grep -vE "^# (Using|  Rank)"
}

for g in 1 10; do
  run "flat8_g$g" "${common[@]}" -m --ranks-per-node 1 --link-gbps $g --dense-best --codec "$codecs"
done
for g in 2.5 5 25 40; do
  run "flat8_g$g" "${common[@]}" --ranks-per-node 1 --link-gbps $g --dense-best --codec "$codecs"
done
hier_codecs="fp16 uniform:bits=8 uniform:bits=4 sign topk:ratio=0.01 randk:ratio=0.01"
run hier2x4_g1 "${common[@]}" -m --ranks-per-node 4 --link-gbps 1 --dense-best --codec "$hier_codecs"
run flat2x4_g1_sra "${common[@]}" -m --ranks-per-node 4 --link-gbps 1 --dense-best --algo sra \
  --codec "fp16 uniform:bits=8 uniform:bits=4 sign"
run flat2x4_g1_sparse "${common[@]}" -m --ranks-per-node 4 --link-gbps 1 --dense-best --algo sparse-sr --codec "topk:ratio=0.01"
run flat2x4_g1_randk "${common[@]}" -m --ranks-per-node 4 --link-gbps 1 --dense-best --algo randk --codec "randk:ratio=0.01"

run sizes8_g1 allreduce -r 8 -b 64K -e 64M -f 4 -n 5 -w 1 -z --link-us 20 --ranks-per-node 1 --link-gbps 1 \
  --dense-best --codec "$hier_codecs"

plot="$(dirname "$0")/plot.py"
PYENV_VERSION=system python3 "$plot" "$out"/flat8_g*.json -o "$out/flat8" | tee "$out/breakeven.txt"
PYENV_VERSION=system python3 "$plot" "$out/sizes8_g1.json" -o "$out/sizes8_g1"
