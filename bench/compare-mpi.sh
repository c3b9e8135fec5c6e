#!/usr/bin/env bash
# compare-mpi.sh — gccl-bench against mpi-baseline (the MPI library's own
# MPI_Allreduce) in the same run: allreduce, float, sum, median of 5 timings,
# p = 2 and 4, at 1 MiB, 16 MiB and 100 MiB, then a latency sweep 8 B .. 64 KiB.
#
#   bench/compare-mpi.sh [BUILD_DIR]        (default: build)
#
# Prints per (p, size) the bus bandwidth of each and the ratio gccl/MPI (> 1:
# gccl is faster), out-of-place and in-place; for the latency sweep, the times
# and the ratio gccl/MPI (< 1: gccl is faster). Every run also checks its
# results (-c 1); a nonzero #wrong is flagged. Raw outputs are kept in a
# temporary directory, printed at the end. Takes a few minutes on 2 cores.
set -euo pipefail

BUILD=${1:-build}
GB=$BUILD/bench/gccl-bench
MB=$BUILD/bench/mpi-baseline
for exe in "$GB" "$MB"; do
  [[ -x $exe ]] || { echo "compare-mpi: $exe not found; build with MPI first (cmake --build $BUILD)" >&2; exit 2; }
done

# Open MPI as root; more ranks than the 2 cores; malloc tunables so that MPI's
# per-call buffers are not first-touch page faults (DESIGN.md, "Running things").
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=68719476736
MPIRUN=(mpirun --oversubscribe --bind-to none -x "GLIBC_TUNABLES=$TUNABLES")
COMMON=(allreduce -d float -o sum -c 1 -m)

# Raw outputs go to $GCCL_COMPARE_OUT (created, kept) or a fresh temporary directory.
if [[ -n ${GCCL_COMPARE_OUT:-} ]]; then
  OUT=$GCCL_COMPARE_OUT
  mkdir -p "$OUT"
else
  OUT=$(mktemp -d /tmp/gccl-compare-mpi.XXXXXX)
fi

# run_pair NAME P ARGS...: one gccl-bench and one mpi-baseline run with ARGS.
run_pair() {
  local name=$1 p=$2
  shift 2
  echo "compare-mpi: p=$p $* ..." >&2
  "$GB" "${COMMON[@]}" -r "$p" "$@" >"$OUT/$name.gccl" 2>&1 || {
    echo "compare-mpi: gccl-bench failed, see $OUT/$name.gccl" >&2; tail -3 "$OUT/$name.gccl" >&2; }
  "${MPIRUN[@]}" -np "$p" "$MB" "${COMMON[@]}" "$@" >"$OUT/$name.mpi" 2>&1 || {
    echo "compare-mpi: mpi-baseline failed, see $OUT/$name.mpi" >&2; tail -3 "$OUT/$name.mpi" >&2; }
}

# table MODE P NAME: rows of size joined across the two outputs. MODE bw prints
# busbw and gccl/MPI, recomputed from the time (fields 6, 10: the printed busbw
# has two decimals); MODE lat prints the times and gccl/MPI. #wrong: fields 9, 13.
table() {
  awk -v mode="$1" -v p="$2" '
    FNR == 1 { file++ }
    /^#/ || NF < 9 { next }
    file == 1 { g[$1] = $0; order[++n] = $1; next }
    { m[$1] = $0 }
    function ratio(a, b) { return b > 0 ? sprintf("%8.2f", a / b) : "     n/a" }
    function busbw(bytes, us) { return us > 0 ? bytes / (us * 1e3) * 2 * (p - 1) / p : 0 }
    END {
      for (i = 1; i <= n; i++) {
        s = order[i]; if (!(s in m)) continue
        split(g[s], G); split(m[s], M)
        line = sprintf("%3d %11d", p, s); bad = ""
        for (k = 0; k < 2; k++) {
          f = 6 + 4 * k
          if (G[f] == "") { line = line "   (no in-place)"; break }
          a = G[f]; b = M[f]
          if (mode == "bw") { a = busbw(s, a); b = busbw(s, b) }
          line = line sprintf("  %10.3f %10.3f %s", a, b, ratio(a, b))
          if (G[f + 3] != "0" || M[f + 3] != "0") bad = "   #wrong: gccl " G[f + 3] ", MPI " M[f + 3]
        }
        print line bad
      }
    }' "$OUT/$3.gccl" "$OUT/$3.mpi"
}

for p in 2 4; do
  run_pair "p$p-1M" "$p" -b 1M -e 1M -n 40 -w 5
  run_pair "p$p-16M" "$p" -b 16M -e 16M -n 10 -w 2
  run_pair "p$p-100M" "$p" -b 100M -e 100M -n 5 -w 2
  run_pair "p$p-lat" "$p" -b 8 -e 64K -f 2 -n 2000 -w 200
done

echo "# gccl-bench vs mpi-baseline: allreduce float sum, median of 5 timings, ranks: gccl threads / MPI processes"
grep -h -m1 '^# gccl ' "$OUT/p2-100M.gccl" || true
head -1 "$OUT/p2-100M.mpi" # the MPI library's version
grep -h -m1 'memcpy bandwidth' "$OUT/p2-100M.gccl" || true
echo "#"
echo "# bus bandwidth (GB/s); ratio gccl/MPI > 1: gccl faster"
echo "#                    ------------ out-of-place -----------  -------------- in-place --------------"
echo "#  p        size        gccl        MPI gccl/MPI        gccl        MPI gccl/MPI"
for p in 2 4; do
  for s in 1M 16M 100M; do table bw "$p" "p$p-$s"; done
done
echo "#"
echo "# latency sweep: time per call (us); ratio gccl/MPI < 1: gccl faster"
echo "#                    ------------ out-of-place -----------  -------------- in-place --------------"
echo "#  p        size        gccl        MPI gccl/MPI        gccl        MPI gccl/MPI"
for p in 2 4; do table lat "$p" "p$p-lat"; done
echo "# raw outputs: $OUT"
