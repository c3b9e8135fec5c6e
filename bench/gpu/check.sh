#!/usr/bin/env bash
# bench/gpu/check.sh — everything the GPU path promises, on a machine with a CUDA
# GPU, in one run (BENCHMARKS.md has how long it took on an H200):
#   1. builds gccl with CUDA (CUDA_ARCH, default 90) into BUILD (default build-gpu);
#   2. runs the GPU unit tests (GoogleTest: codecs against the CPU, collectives on
#      device buffers; they skip, saying so, without a GPU);
#   3. gpu-codec-bench: every GPU codec's frames against the CPU codec's on fresh
#      random inputs of 25.6 M floats (byte for byte; CHECK_MAX) and its GPU decode
#      against the CPU's, then encode and decode kernel times on 25.6 M and 256 M
#      floats (CUDA events, median of 20 after warm-up) beside a device-to-device
#      copy of the same bytes;
#   4. torch.topk on the same GPU, the peer of the top-k kernel;
#   5. the DDP hook on CUDA tensors (python/tests/device_hook.py), bit for bit
#      against the CPU path: one-process DDP through transport="torch" (NCCL) and
#      "gccl", and, where mpirun and an MPI build are here, two MPI processes
#      sharing the GPU with transport="gccl".
# PREBUILT=1 skips step 1: BUILD already holds gpu-codec-bench and tests/gccl_tests,
# built on another x86-64 machine with the same CUDA_ARCH: a lent GPU machine has few
# minutes to spend on nvcc, and no GoogleTest. libnccl.so.2 is looked for where pip's
# nvidia-nccl package puts it when the loader does not know it.
# Exit code: nonzero if the build, a test or a frame comparison fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=$(nproc)
start=$(date +%s)

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if [ "${PREBUILT:-0}" = 1 ]; then
  [ -x "$BUILD/bench/gpu-codec-bench" ] || { echo "check.sh: PREBUILT=1 but $BUILD/bench/gpu-codec-bench is missing"; exit 1; }
  tests=OFF
  [ -x "$BUILD/tests/gccl_tests" ] && tests=ON
  echo "check.sh: using the binaries in $BUILD (built elsewhere); unit tests: $tests"
else
  tests=ON
  if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
    echo "check.sh: GoogleTest is not installed here: the unit tests are not built (gpu-codec-bench still checks frames)"
    tests=OFF
  fi
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGCCL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
    -DGCCL_WITH_MPI="${GCCL_WITH_MPI:-AUTO}" -DGCCL_BUILD_TESTS=$tests > "$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log"; exit 1; }
  targets=(gccl gpu-codec-bench)
  [ "$tests" = ON ] && targets+=(gccl_tests)
  cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" > "$BUILD.build.log" 2>&1 || { tail -50 "$BUILD.build.log"; exit 1; }
  echo "check.sh: built in $(($(date +%s) - start)) s"
fi
if ! ldconfig -p 2> /dev/null | grep -q libnccl.so.2; then
  nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2> /dev/null || true)
  if [ -n "$nccl_lib" ] && [ -e "$nccl_lib/libnccl.so.2" ]; then
    export LD_LIBRARY_PATH="$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "check.sh: libnccl.so.2 from $nccl_lib"
  fi
fi

status=0
if [ "$tests" = ON ]; then
  "$BUILD/tests/gccl_tests" --gtest_filter='Gpu*:DeviceBuffers*:DeviceCodec*:NcclComm*' --gtest_brief=1 || status=1
fi
# Frames are compared with the CPU's at the smaller count; the CPU side of a
# comparison at 256 M takes about 35 s a row.
"$BUILD/bench/gpu-codec-bench" -n "${COUNTS:-25600000,256000000}" -c "${CHECK_MAX:-25600000}" || status=1
python3 bench/gpu/torch_topk.py ${COUNTS:+${COUNTS//,/ }} || true
if [ -e "$BUILD/libgccl.so" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null; then
  export GCCL_LIBRARY="$PWD/$BUILD/libgccl.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  port=$((29500 + RANDOM % 1000))
  python3 python/tests/device_hook.py torch cuda:0 $port || status=1
  python3 python/tests/device_hook.py gccl cuda:0 $((port + 1)) || status=1
  if command -v mpirun > /dev/null && python3 -c 'import gccl, mpi4py; assert gccl.HAVE_MPI' 2> /dev/null; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe --bind-to none \
      -x GCCL_LIBRARY -x PYTHONPATH python3 python/tests/device_hook.py gccl-mpi cuda:0 $((port + 2)) || status=1
  else
    echo "check.sh: no mpirun, mpi4py or MPI build here: the two-process device hook check is not run"
  fi
else
  echo "check.sh: no CUDA torch here (or no libgccl.so): the device hook checks are not run"
fi
echo "check.sh: finished in $(($(date +%s) - start)) s, status $status"
exit $status
