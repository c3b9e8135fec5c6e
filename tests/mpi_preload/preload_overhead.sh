#!/usr/bin/env bash
# preload_overhead.sh — the time libgccl-mpi-preload.so adds to an MPI_Allreduce it
# passes to MPI (1 float, MPI_SUM: below any GCCL_COMPRESS_MIN_BYTES).
#
#   preload_overhead.sh PRELOAD_OVERHEAD_BIN LIBGCCL_MPI_PRELOAD_SO [N] [REPEATS] [NP...]
#
# For each process count (default 1 and 2), runs N calls (default 10^6) without
# and with LD_PRELOAD, alternately, REPEATS times each (default 3), and prints the
# fastest run of each and the difference in ns per call. np 1 shows the
# interposer's own cost best: MPI's call is then a copy, so noise is small.
# Extra mpirun options (e.g. an ASan runtime to preload first) come from
# PRELOAD_OVERHEAD_MPIRUN_ARGS and PRELOAD_OVERHEAD_PRELOAD_FIRST.
set -euo pipefail
bin=$1
lib=$2
n=${3:-1000000}
repeats=${4:-3}
shift $(($# < 4 ? $# : 4))
nps=("$@")
[[ ${#nps[@]} -gt 0 ]] || nps=(1 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
preload=${PRELOAD_OVERHEAD_PRELOAD_FIRST:+$PRELOAD_OVERHEAD_PRELOAD_FIRST:}$lib
# shellcheck disable=SC2206
extra=(${PRELOAD_OVERHEAD_MPIRUN_ARGS:-})

run() { # np, "plain"|"preload" -> ns per call
  local env=()
  [[ $2 == preload ]] && env=(-x "LD_PRELOAD=$preload")
  mpirun -np "$1" --oversubscribe --bind-to none --mca btl self,vader "${extra[@]}" "${env[@]}" "$bin" "$n" |
    sed -n 's/.*: \([0-9.]*\) ns per call$/\1/p'
}

for np in "${nps[@]}"; do
  best_plain="" best_preload=""
  for ((i = 0; i < repeats; i++)); do
    p=$(run "$np" plain)
    q=$(run "$np" preload)
    [[ -n "$p" && -n "$q" ]] || { echo "preload_overhead.sh: a run printed no time" >&2; exit 1; }
    best_plain=$(awk -v a="$p" -v b="$best_plain" 'BEGIN { print (b == "" || a < b) ? a : b }')
    best_preload=$(awk -v a="$q" -v b="$best_preload" 'BEGIN { print (b == "" || a < b) ? a : b }')
  done
  awk -v np="$np" -v n="$n" -v r="$repeats" -v p="$best_plain" -v q="$best_preload" 'BEGIN {
    printf "np %d, %d calls of MPI_Allreduce(1 float, MPI_SUM), best of %d: without LD_PRELOAD %.1f ns, with %.1f ns: %+.1f ns per call\n",
           np, n, r, p, q, q - p }'
done
