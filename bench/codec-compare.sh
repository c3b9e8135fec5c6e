#!/usr/bin/env bash
# codec-compare.sh — gccl's topk encode against numpy.argpartition and torch.topk,
# one thread each, on the same 25,557,032 floats (ResNet-50's gradient).
#
#   bench/codec-compare.sh BUILD_DIR [N]
#
# BUILD_DIR is a build configured with -DGCCL_BUILD_BENCH=ON (codec-bench built).
# topk_peers.py writes the data (numpy seed 0, raw float32) and times the peers;
# codec-bench then encodes that file. The bar (DESIGN.md, "Performance model"):
# exact top-k at k = 1% >= 40x faster than argpartition and >= 100x faster than
# torch.topk. Needs Debian's python3-numpy and python3-torch.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [N]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
bench=$1/bench/codec-bench
n=${2:-25557032}
[[ -x $bench ]] || { echo "$0: $bench not found: build with -DGCCL_BUILD_BENCH=ON" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

PYENV_VERSION=system python3 "$here/topk_peers.py" -n "$n" --ratio 0.01 --runs 3 --write "$tmp/x.f32" \
  | tee "$tmp/peers.txt"
echo
"$bench" --input "$tmp/x.f32" -r 11 \
  -s "topk:ratio=0.01,ef=0 topk:ratio=0.01 topk:ratio=0.01,approx=1,ef=0" | tee "$tmp/codec.txt"
echo

# Median milliseconds of a peer (column 4) and of a spec's encode (column 3).
peer_ms() { awk -v p="$1" '$1 == p { print $4 }' "$tmp/peers.txt"; }
enc_ms() { awk -v s="$1" '$1 == s && $3 ~ /^[0-9.]+$/ { print $3 }' "$tmp/codec.txt"; }
argp=$(peer_ms numpy.argpartition)
torch=$(peer_ms torch.topk)
[[ -n $argp && -n $torch ]] || { echo "$0: no peer timings" >&2; exit 1; }

printf '%-32s %9s %14s %14s\n' "# encode (k = 1%)" "ms" "x_argpartition" "x_torch.topk"
printf '%-32s %9.1f %14s %14s\n' numpy.argpartition "$argp" 1.0 - torch.topk "$torch" - 1.0
status=0
for spec in "topk:ratio=0.01,ef=0" "topk:ratio=0.01" "topk:ratio=0.01,approx=1,ef=0"; do
  ms=$(enc_ms "$spec")
  if [[ -z $ms ]]; then
    echo "$spec: no timing (see codec-bench's output above)"
    status=1
    continue
  fi
  awk -v s="$spec" -v m="$ms" -v a="$argp" -v t="$torch" \
    'BEGIN { printf "%-32s %9.2f %13.1fx %13.1fx\n", s, m, a / m, t / m }'
done
ms=$(enc_ms "topk:ratio=0.01,ef=0")
if [[ -n $ms ]]; then
  awk -v m="$ms" -v a="$argp" -v t="$torch" 'BEGIN {
    ok = a / m >= 40 && t / m >= 100
    printf "# bar (exact topk, ef=0): >= 40x argpartition, >= 100x torch.topk: %s\n", ok ? "met" : "NOT met" }'
fi
exit $status
