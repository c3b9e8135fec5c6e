#!/usr/bin/env bash
# gccl-bench -J and bench/plot.py end to end: two link rates, two codecs; the JSON
# must hold every row with its compressed columns, and both PNGs must be drawn.
# Usage: plot_check.sh GCCL_BENCH PLOT_PY
set -euo pipefail
bench=$1 plot=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for g in 1 10; do
  "$bench" allreduce -r 4 --ranks-per-node 1 --link-gbps "$g" --dense-best --codec "fp16 topk:ratio=0.01" \
    -b 64K -e 256K -f 4 -n 2 -w 1 -z -J "$dir/g$g.json" >/dev/null
done
export PYENV_VERSION=system # Debian's interpreter, which has matplotlib
python3 - "$dir/g1.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
codecs = {r["codec"] for r in rows}
assert {"none", "fp16", "topk:ratio=0.01"} <= codecs, codecs
for r in rows:
    for key in ("size", "time_us", "busbw", "wire_bytes", "ratio", "rel_err", "speedup"):
        assert key in r, (key, r)
    if r["codec"] == "fp16":
        assert 1.9 < r["ratio"] < 2.1 and r["rel_err"] < 1e-3, r
    if r["codec"] == "topk:ratio=0.01":
        assert r["ratio"] > 10 and r["speedup"] > 1, r
PY
python3 "$plot" "$dir/g1.json" "$dir/g10.json" -o "$dir/out"
for f in busbw speedup; do
  [[ -s "$dir/out-$f.png" ]] || { echo "plot.py drew no $f PNG"; exit 1; }
done
echo "plot check OK"
