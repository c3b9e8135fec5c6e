#!/usr/bin/env bash
# Installs a build into a temporary prefix and builds the README example against it,
# once through find_package(gccl) and once through pkg-config.
set -euo pipefail
build=${1:-build-release}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
mkdir -p "$prefix/consumer"
cp "$root/examples/allreduce_threads.c" "$prefix/consumer/"
cat >"$prefix/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(gccl REQUIRED)
add_executable(example allreduce_threads.c)
target_link_libraries(example gccl::gccl)
CM
cmake -S "$prefix/consumer" -B "$prefix/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer/build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer/build/example"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" cc -std=c11 "$root/examples/allreduce_threads.c" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gccl) -lpthread -o "$prefix/example-pc"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/example-pc"
echo "install check: find_package(gccl) and pkg-config both build and run the example"
