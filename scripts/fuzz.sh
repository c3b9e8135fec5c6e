#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer target for gcclDecodeAccumulate (tests/fuzz) with
# clang and ASan/UBSan, seeds it with tests/fuzz/corpus plus freshly encoded
# frames, and runs it.
#
# Usage: scripts/fuzz.sh [SECONDS (default 60)] [WORKDIR (default build-fuzz)]
# Exit status: 0 when the run ends without a crash; 1 on a crash (the input that
# caused it is saved under WORKDIR/artifacts/ and named in the output: replay it
# with WORKDIR/build/fuzz_decode FILE).
set -euo pipefail

SECS=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${2:-$ROOT/build-fuzz}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz.sh: installing clang" >&2
  apt-get update && apt-get install -y clang libclang-rt-14-dev
fi

cmake -S "$ROOT/tests/fuzz" -B "$WORK/build" -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build "$WORK/build" -j"$(nproc)"

CORPUS=$(mktemp -d "$WORK/corpus.XXXXXX")
trap 'rm -rf "$CORPUS"' EXIT
cp "$ROOT"/tests/fuzz/corpus/*.bin "$CORPUS"/ 2>/dev/null || true
"$WORK/build/make_corpus" "$CORPUS" "$(date +%s)" 8
echo "fuzz.sh: $(ls "$CORPUS" | wc -l) seed inputs; fuzzing for $SECS s"

mkdir -p "$WORK/artifacts"
set +e
"$WORK/build/fuzz_decode" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$WORK/artifacts/" "$CORPUS" >"$WORK/fuzz.log" 2>&1
rc=$?
set -e
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY|fuzz_decode:|Test unit written' "$WORK/fuzz.log" || true
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/fuzz.log")
if [ "$rc" -ne 0 ]; then
  echo "fuzz.sh: CRASH after ${execs:-unknown} executions (exit $rc); full log in $WORK/fuzz.log" >&2
  echo "fuzz.sh: reproducers (replay with $WORK/build/fuzz_decode FILE):" >&2
  ls -1 "$WORK"/artifacts/ >&2
  exit 1
fi
echo "fuzz.sh: ${execs:-unknown} executions in $SECS s, no crash; full log in $WORK/fuzz.log"
