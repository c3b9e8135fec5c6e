#!/usr/bin/env bash
# powersgd.sh — the low-rank allreduce on the link model (BENCHMARKS.md, "PowerSGD"):
# 100 MiB float32 sum on 8 thread ranks as 8 nodes, powersgd at ranks 1, 4 and 16
# against the fastest dense algorithm of the same run (--dense-best), times
# simulated (each rank's compute is its thread's CPU time).
#   1. 1 Gbit/s, median of 5, the issue's bar (rank 4 at least 20x the best dense);
#   2. 2.5, 5, 10, 25 and 40 Gbit/s (median of 3), for the break-even link rate
#      of each rank (bench/plot.py interpolates it; written to OUT/breakeven.txt).
# OpenBLAS keeps powersgd's blocks on the calling thread either way; set
# OPENBLAS_NUM_THREADS to compare.
# Usage: bench/powersgd.sh BUILD_DIR OUT_DIR     (about 5 minutes on 2 cores)
set -euo pipefail
build=${1:?build directory} out=${2:?output directory}
bench=$build/bench/gccl-bench
mkdir -p "$out"
codecs="powersgd:rank=1 powersgd:rank=4 powersgd:rank=16"
common=(allreduce -r 8 -b 100M -e 100M -w 1 -z --link-us 20 -m --ranks-per-node 1 --dense-best)

for g in 1 2.5 5 10 25 40; do
  n=3
  [ "$g" = 1 ] && n=5
  echo "=== ${g} Gbit/s: $bench ${common[*]} -n $n --link-gbps $g --codec \"$codecs\""
  "$bench" "${common[@]}" -n "$n" --link-gbps "$g" --codec "$codecs" -J "$out/flat8_g$g.json" |
    tee "$out/flat8_g$g.txt" | grep -vE "^# (Using|  Rank)"
done
PYENV_VERSION=system python3 "$(dirname "$0")/plot.py" "$out"/flat8_g*.json -o "$out/flat8" | tee "$out/breakeven.txt"
