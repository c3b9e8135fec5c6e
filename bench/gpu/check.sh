#!/usr/bin/env bash
# bench/gpu/check.sh — everything the GPU path promises, on a machine with a CUDA
# GPU, in one run (under 8 minutes on an H200):
#   1. builds gccl with CUDA (CUDA_ARCH, default 90) into BUILD (default build-gpu);
#   2. runs the GPU unit tests (GoogleTest: codecs against the CPU, collectives on
#      device buffers; they skip, saying so, without a GPU);
#   3. gpu-codec-bench: every GPU codec's frames against the CPU codec's on fresh
#      random inputs (byte for byte) and its GPU decode against the CPU's, then
#      encode and decode kernel times on 25.6 M and 256 M floats (CUDA events,
#      median of 20 after warm-up) beside a device-to-device copy of the same bytes;
#   4. torch.topk on the same GPU, the peer of the top-k kernel.
# Exit code: nonzero if the build, a test or a frame comparison fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=$(nproc)
start=$(date +%s)

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
tests=ON
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  echo "check.sh: GoogleTest is not installed here: the unit tests are not built (gpu-codec-bench still checks frames)"
  tests=OFF
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGCCL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DGCCL_WITH_MPI=OFF -DGCCL_BUILD_TESTS=$tests > "$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
targets=(gpu-codec-bench)
[ "$tests" = ON ] && targets+=(gccl_tests)
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" > "$BUILD.build.log" 2>&1 || { tail -50 "$BUILD.build.log"; exit 1; }
echo "check.sh: built in $(($(date +%s) - start)) s"

status=0
if [ "$tests" = ON ]; then
  "$BUILD/tests/gccl_tests" --gtest_filter='Gpu*:DeviceBuffers*:DeviceCodec*:NcclComm*' --gtest_brief=1 || status=1
fi
"$BUILD/bench/gpu-codec-bench" -n "${COUNTS:-25600000,256000000}" || status=1
python3 bench/gpu/torch_topk.py ${COUNTS:+${COUNTS//,/ }} || true
echo "check.sh: finished in $(($(date +%s) - start)) s, status $status"
exit $status
