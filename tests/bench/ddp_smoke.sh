#!/usr/bin/env bash
# ddp_smoke.sh LIBGCCL — the DDP time-to-accuracy bed's smoke run (bench/ddp-testbed.sh
# -q: 2 namespaces at 1 Gbit/s, DDP's allreduce and gccl's uniform 4-bit hook, 40
# steps each, and the split): it must finish, train both rows with identical
# replicas, write the table, JSON and plot, and leave no namespace or link behind.
# Exit 77 (skipped) where the machine cannot make namespaces or tbf (not root, no
# ip/tc, a container), or lacks Debian's torch or the data set.
set -uo pipefail
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d /tmp/gccl-ddp-smoke.XXXXXX)
trap 'rm -rf "$out"' EXIT
source "$here/run_bed.sh"
run_bed "$here/../../bench/ddp-testbed.sh" -q -l "$lib" -o "$out" -t 150
rc=$BED_RC
((rc == 77)) && exit 77
fail=0
((rc == 0)) || { echo "FAIL: ddp-testbed.sh exited $rc"; fail=1; }
((BED_LEFT == 0)) || { echo "FAIL: the run left $BED_LEFT namespaces or links behind"; fail=1; }
for row in ddp gccl-uniform4; do
  # trained to the end, an accuracy, replicas identical
  grep -qE "^\| $row \| [0-9.]+ .*\| [0-9.]+ \| [0-9.]+ \| yes \| .*\| ok" "$out/results.md" ||
    { echo "FAIL: no finished row $row with identical replicas"; fail=1; }
done
grep -q "^Split of DDP's step" "$out/results.md" || { echo "FAIL: no split"; fail=1; }
for f in results.json accuracy.png; do [[ -s $out/$f ]] || { echo "FAIL: no $f"; fail=1; }; done
cat "$out/results.md" 2>/dev/null
exit $fail
