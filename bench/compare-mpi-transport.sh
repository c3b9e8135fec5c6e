#!/usr/bin/env bash
# compare-mpi-transport.sh — gccl's dense allreduce over its MPI transport against
# Open MPI's own MPI_Allreduce, in the same mpirun, on shared memory: float32 sum,
# p = 2 and 4, 16 MiB and 100 MiB, median of 5 timings, results checked (-c 1).
#
#   bench/compare-mpi-transport.sh BUILD_DIR      (BUILD_DIR/bench/gccl-bench, built with MPI)
#
# One gccl-bench --mpi run per p (mpirun --oversubscribe --bind-to none, the glibc
# malloc tunables of DESIGN.md) times per size: MPI_Allreduce as Open MPI is
# configured by default, gccl's dense allreduce as its tuner picks it (auto), and
# gccl's ring, rhd and tree forced (--dense-best). Prints one table of bus
# bandwidths (GB/s, recomputed from the times) and ratios gccl/MPI (> 1: gccl
# faster; issue 5's bar is >= 0.9), out-of-place and in-place. Raw outputs and
# the table (table.txt) are kept in $GCCL_COMPARE_OUT or a fresh directory under
# /tmp, printed at the end.
# Takes 2-3 minutes on 2 cores; numbers are only meaningful on an idle machine.
set -euo pipefail

BUILD=${1:?usage: compare-mpi-transport.sh BUILD_DIR}
GB=$BUILD/bench/gccl-bench
[[ -x $GB ]] || { echo "compare-mpi-transport: $GB not found; build with MPI first" >&2; exit 2; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=68719476736
MPIRUN=(mpirun --oversubscribe --bind-to none -x "GLIBC_TUNABLES=$TUNABLES")
# 16 MiB, then 16 MiB * 6.25 = 100 MiB exactly.
ARGS=(--mpi allreduce -d float -o sum -b 16M -e 100M -f 6.25 -n 10 -w 2 -m -c 1 --dense-best --codec none)

if [[ -n ${GCCL_COMPARE_OUT:-} ]]; then
  OUT=$GCCL_COMPARE_OUT
  mkdir -p "$OUT"
else
  OUT=$(mktemp -d /tmp/gccl-compare-mpi-transport.XXXXXX)
fi

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for p in 2 4; do
  echo "compare-mpi-transport: p=$p ..." >&2
  "${MPIRUN[@]}" -np "$p" "$GB" "${ARGS[@]}" -J "$OUT/p$p.json" >"$OUT/p$p.txt" 2>&1 || {
    echo "compare-mpi-transport: p=$p failed, see $OUT/p$p.txt" >&2
    tail -5 "$OUT/p$p.txt" >&2
    exit 1
  }
done

{
  echo "# gccl dense allreduce over the MPI transport vs Open MPI MPI_Allreduce: float32 sum, shared memory,"
  echo "# median of 5 timings of 10 calls, slowest rank; $(date -Is); $(nproc) cores, load before $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -h -m1 '^# Open MPI' "$OUT/p2.txt" || true
  grep -h -m1 'memcpy bandwidth' "$OUT/p2.txt" || true
  echo "# busbw (GB/s) from the times; x: gccl/MPI (> 1: gccl faster); best: the fastest of ring, rhd, tree"
  printf "# %2s %10s | %8s %8s %6s | %8s %-5s %6s | %8s %8s %6s\n" p size "MPI" "gccl" "x" "best" "algo" "x" \
    "MPI-ip" "gccl-ip" "x-ip"
  for p in 2 4; do
    # Rows: size $1, time $6 and in-place time $10 (us), #wrong $9 and $13, algo $15.
    awk -v p="$p" '
      /^#/ || NF < 15 { next }
      function busbw(bytes, us) { return us > 0 ? bytes / (us * 1e3) * 2 * (p - 1) / p : 0 }
      {
        s = $1; if (!(s in seen)) { seen[s] = 1; order[++n] = s }
        if ($15 == "mpi") { m[s] = busbw(s, $6); mi[s] = busbw(s, $10) }
        else if ($15 == "auto") { g[s] = busbw(s, $6); gi[s] = busbw(s, $10) }
        else if (busbw(s, $6) > best[s]) { best[s] = busbw(s, $6); ba[s] = $15 }
        if ($9 != "0" || $13 != "0") bad[s] = bad[s] " " $15 ":#wrong=" $9 "/" $13
      }
      END {
        for (i = 1; i <= n; i++) {
          s = order[i]
          printf "  %2d %10d | %8.3f %8.3f %6.2f | %8.3f %-5s %6.2f | %8.3f %8.3f %6.2f%s\n", p, s, m[s], g[s],
            (m[s] > 0 ? g[s] / m[s] : 0), best[s], ba[s], (m[s] > 0 ? best[s] / m[s] : 0), mi[s], gi[s],
            (mi[s] > 0 ? gi[s] / mi[s] : 0), bad[s]
        }
      }' "$OUT/p$p.txt"
  done
  echo "# raw outputs: $OUT"
} | tee "$OUT/table.txt"
