#!/usr/bin/env bash
# netns_smoke.sh BUILD — the test bed's one-minute smoke run (bench/netns-testbed.sh -q:
# 2 namespaces, 1 MiB, fp16): it must finish, print the Open MPI and fp16 rows with
# their checks passed, and leave no namespace or link behind. Exit 77 (skipped) where
# the machine cannot make namespaces (not root, no ip/tc/mpirun, a container).
set -uo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d /tmp/gccl-netns-smoke.XXXXXX)
trap 'rm -rf "$out"' EXIT
source "$here/../bench/run_bed.sh"
run_bed "$here/../../bench/netns-testbed.sh" -q -b "$build" -o "$out" -t 300
rc=$BED_RC
((rc == 77)) && exit 77
fail=0
((rc == 0)) || { echo "FAIL: netns-testbed.sh exited $rc"; fail=1; }
((BED_LEFT == 0)) || { echo "FAIL: the run left $BED_LEFT namespaces or links behind"; fail=1; }
grep -qE '^OpenMPI-ring +mpi +1048576 +[0-9.]+' "$out/summary.txt" || { echo "FAIL: no Open MPI row"; fail=1; }
grep -qE '^fp16 +auto +1048576 +[0-9.]+' "$out/summary.txt" || { echo "FAIL: no fp16 row"; fail=1; }
grep -q 'Out of bounds values : 0 OK' "$out/summary.txt" || { echo "FAIL: the checks did not pass"; fail=1; }
cat "$out/summary.txt"
exit $fail
