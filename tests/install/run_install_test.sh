#!/usr/bin/env bash
# Install test: installs the build into a scratch prefix, then configures, builds and runs a
# small user project (consumer/) against it with find_package(c10d) and c10d::c10d; then runs
# the installed c10d-bench, which links libc10d.so, with no LD_LIBRARY_PATH: it must find the
# library through its own RPATH.
#
# Usage: run_install_test.sh <c10d build dir> <consumer source dir>
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 <c10d build dir> <consumer source dir>" >&2
  exit 2
fi
build_dir=$1
consumer_dir=$2

# shellcheck source=SCRIPTDIR/scratch_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/scratch_install.sh"
scratch_install install-test "$build_dir"

# A sanitized libc10d needs a sanitized executable (the runtime must load first).
sanitize=$(sed -n 's/^C10D_SANITIZE:STRING=//p' "$build_dir/CMakeCache.txt")
generator=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build_dir/CMakeCache.txt")
args=(-S "$consumer_dir" -B "$tmp_dir/build" "-DCMAKE_PREFIX_PATH=$prefix"
      -DCMAKE_BUILD_TYPE=Release)
if [[ -n "$generator" ]]; then
  args+=(-G "$generator")
fi
if [[ -n "$sanitize" ]]; then
  args+=("-DCMAKE_CXX_FLAGS=-fsanitize=$sanitize" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=$sanitize")
fi

echo "install-test: configuring and building the consumer"
cmake "${args[@]}"
cmake --build "$tmp_dir/build"

libdir=$(find "$prefix" -name 'libc10d.so*' -printf '%h\n' -quit)
if [[ -z "$libdir" ]]; then
  echo "install-test: no libc10d.so under $prefix" >&2
  exit 1
fi

echo "install-test: running the consumer"
output=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp_dir/build/consumer")
echo "$output"
if [[ "$output" != OK* ]]; then
  echo "install-test: the consumer did not print OK" >&2
  exit 1
fi
# The installed c10d-bench (when the build has the benchmarks) at world 1, on its own store,
# with nothing but its RPATH to find libc10d.so; -c 1 makes a wrong value fail.
if grep -q '^C10D_BUILD_BENCH:BOOL=ON$' "$build_dir/CMakeCache.txt"; then
  bindir=$(sed -n 's/^CMAKE_INSTALL_BINDIR:PATH=//p' "$build_dir/CMakeCache.txt")
  bench="$prefix/${bindir:-bin}/c10d-bench"
  echo "install-test: running the installed c10d-bench"
  if ! env -u LD_LIBRARY_PATH RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=0 \
      C10D_INIT_METHOD=env:// C10D_BACKEND=tcp "$bench" all_reduce -b 8 -e 8 -n 1 -w 0 -c 1; then
    echo "install-test: the installed $bench did not run (does it find libc10d.so?)" >&2
    exit 1
  fi
fi
echo "install-test: passed"
