#!/usr/bin/env bash
# Every test: a Release build, an ASan+UBSan build and a TSan build, each under
# ctest, the Python tests (pytest) on the Release library, plus an install check
# (find_package and pkg-config) and a minute of fuzzing per libFuzzer target.
# Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

build_and_test() { # name, cmake args...
  local dir=build-$1; shift
  echo "=== $dir"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" ${CTEST_ARGS:-})
}

# The CUDA kernels compile and link whenever the toolkit is here, for the
# architectures CI checks (their tests skip without a GPU).
cuda_args=()
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc" ]; then
  cuda_args=(-DGCCL_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="80;90")
else
  echo "=== no CUDA toolkit here: the GPU kernels and their tests are not built"
  cuda_args=(-DGCCL_WITH_CUDA=OFF)
fi
build_and_test release -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"

# The Python binding, DDP hooks (torch.multiprocessing, gloo; mpirun for the MPI
# mode) and a short convergence run, on the Release library with Debian's
# interpreter (its packages: python3-torch, ...).
echo "=== python"
GCCL_LIBRARY="$PWD/build-release/libgccl.so" /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
build_and_test asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGCCL_SANITIZE=address -DGCCL_BUILD_BENCH=OFF
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  build_and_test tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGCCL_SANITIZE=thread -DGCCL_BUILD_BENCH=OFF

scripts/check-install.sh build-release

# libFuzzer (clang, ASan+UBSan) for a minute per target: the codecs' decoders,
# the collectives' decoders and the spec parser.
echo "=== fuzz"
scripts/fuzz.sh "${GCCL_FUZZ_SECONDS:-60}" build-fuzz
