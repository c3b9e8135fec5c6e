#!/usr/bin/env bash
# project_check.sh — gccl-project's table has a row per cell and its published
# formulas give what they say: NCCL's ring at 8 nodes, 10 Gbit/s, 5 us and 1 MiB is
# 2*7*5e-6 + 2*7/8 * 1048576*8 / 1e10 s = 1.538 ms; --validate prints every row.
set -euo pipefail
bin=${1:?usage: project_check.sh PATH/TO/gccl-project}
out=$("$bin" -s 1M -n "8 1024" -l "10 400" -c "fp16 topk:ratio=0.01")
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ \|' <<<"$out")
[[ $rows -eq 4 ]] || { echo "project_check: $rows rows, want 4"; echo "$out"; exit 1; }
ring=$(awk '$1 == 8 && $3 == 10 { for (i = 1; i <= NF; i++) if ($i == "|") bar = i; print $(bar + 1) }' <<<"$out" | tail -1)
awk -v r="$ring" 'BEGIN { exit !(r > 1.528 && r < 1.548) }' || { echo "project_check: NCCL ring $ring ms, want 1.538"; echo "$out"; exit 1; }
val=$("$bin" --validate -s 1M -p 4 -L 1 -l 1 -c "fp16 topk:ratio=0.01")
for row in "none +ring" "none +tree" "fp16 " "topk:ratio=0.01 "; do
  grep -qE "^$row" <<<"$val" || { echo "project_check: --validate has no row $row"; echo "$val"; exit 1; }
done
echo "project_check: OK"
