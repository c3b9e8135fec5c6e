#!/usr/bin/env bash
# Installs what building and testing gccl needs on Debian 12, when missing.
# Usage: scripts/install-deps.sh [--bench-only]
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config)
if [[ "${1:-}" != "--bench-only" ]]; then
  # clang and its runtime (libFuzzer, sanitizers) build the fuzz targets;
  # matplotlib draws bench/plot.py's PNGs (tested); mpi4py and numpy run the
  # interposer's Python test; valgrind checks one MPI test; iproute2 (ip, tc)
  # builds the slow-network test bed; torch, sklearn, pytest, pip and setuptools
  # test the Python binding, its DDP hooks and examples/train_digits.py; venv is
  # where the install test puts `pip install ./python` (Debian's pip refuses the system);
  # OpenBLAS does the powersgd codec's matrix products (CBLAS, loaded when first used).
  pkgs+=(libgtest-dev openmpi-bin libopenmpi-dev libzstd-dev clang libclang-rt-14-dev python3 python3-matplotlib
    python3-numpy python3-mpi4py valgrind iproute2 python3-torch python3-sklearn python3-pytest python3-pip
    python3-setuptools python3-venv libopenblas0)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
