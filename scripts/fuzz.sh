#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets (tests/fuzz) with clang and ASan/UBSan
# and runs each in turn, seeded with its corpus under tests/fuzz/corpus:
#   fuzz_decode      every codec's decoder (gcclDecodeAccumulate): corpus/*.bin
#                    plus frames freshly encoded with a random seed;
#   fuzz_collective  the decoders of the compressed collectives (frame_check,
#                    ranged decodes, frame sums, sparse-sr's range messages):
#                    the same seeds;
#   fuzz_spec        the codec spec parser: corpus/spec/*.
# CI runs it for 60 s per target; for long runs give more seconds, and targets:
#   scripts/fuzz.sh 3600 build-fuzz fuzz_collective
#
# Usage: scripts/fuzz.sh [SECONDS per target (default 60)] [WORKDIR (default
#        build-fuzz)] [TARGET ...]
# Exit status: 0 when every run ends without a crash; 1 on a crash (the input
# that caused it is saved under WORKDIR/artifacts/TARGET- and named in the output:
# replay it with WORKDIR/build/TARGET FILE).
set -euo pipefail

SECS=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${2:-$ROOT/build-fuzz}
shift $(($# < 2 ? $# : 2))
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_decode fuzz_collective fuzz_spec)
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz.sh: installing clang" >&2
  apt-get update && apt-get install -y clang libclang-rt-14-dev
fi

cmake -S "$ROOT/tests/fuzz" -B "$WORK/build" -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build "$WORK/build" -j"$(nproc)"

FRAMES=$(mktemp -d "$WORK/corpus.XXXXXX")
SPECS=$(mktemp -d "$WORK/corpus.XXXXXX")
trap 'rm -rf "$FRAMES" "$SPECS"' EXIT
cp "$ROOT"/tests/fuzz/corpus/*.bin "$FRAMES"/ 2>/dev/null || true
"$WORK/build/make_corpus" "$FRAMES" "$(date +%s)" 8
cp "$ROOT"/tests/fuzz/corpus/spec/* "$SPECS"/

mkdir -p "$WORK/artifacts"
failed=0
for target in "${TARGETS[@]}"; do
  seeds=$FRAMES
  [ "$target" = fuzz_spec ] && seeds=$SPECS
  log=$WORK/$target.log
  echo "fuzz.sh: $target: $(ls "$seeds" | wc -l) seed inputs; fuzzing for $SECS s"
  set +e
  "$WORK/build/$target" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$WORK/artifacts/$target-" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::number_of_executed_units|ERROR|SUMMARY|fuzz_[a-z]+:|Test unit written' \
    "$log" || true
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: $target: CRASH after ${execs:-unknown} executions (exit $rc); full log in $log" >&2
    echo "fuzz.sh: reproducers (replay with $WORK/build/$target FILE):" >&2
    ls -1 "$WORK"/artifacts/ >&2
    failed=1
  else
    echo "fuzz.sh: $target: ${execs:-unknown} executions in $SECS s, no crash; full log in $log"
  fi
done
exit $failed
