#!/usr/bin/env bash
# Install test of c10d_torch: installs the build into a scratch prefix, checks that the package
# landed in a site directory the Python looks in for that prefix (site.getsitepackages), then
# imports it from there (the module finds the installed libc10d.so by its RPATH: no
# LD_LIBRARY_PATH) and runs a one-rank group.
#
# Usage: run_install_test.sh <c10d build dir> <python>
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 <c10d build dir> <python>" >&2
  exit 2
fi
build_dir=$1
python=$2

# shellcheck source=SCRIPTDIR/../install/scratch_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/../install/scratch_install.sh"
scratch_install torch-install-test "$build_dir"

init=$(find "$prefix" -path '*/c10d_torch/__init__.py' -print -quit)
if [[ -z "$init" ]]; then
  echo "torch-install-test: no c10d_torch/__init__.py under $prefix" >&2
  exit 1
fi
site_dir=$(dirname "$(dirname "$init")")
echo "torch-install-test: package in $site_dir"

cd "$tmp_dir"  # not the source tree: nothing else named c10d_torch on the path
PYTHONPATH="$site_dir" C10D_PREFIX="$prefix" C10D_SITE_DIR="$site_dir" "$python" - <<'EOF'
import os
import site
import sys

prefix, site_dir = os.environ["C10D_PREFIX"], os.environ["C10D_SITE_DIR"]
wanted = site.getsitepackages([prefix])
if site_dir not in wanted:
    sys.exit(f"{site_dir} is not a site directory of the prefix: {wanted}")

import torch
import torch.distributed as dist

import c10d_torch

if not c10d_torch.__file__.startswith(site_dir):
    sys.exit(f"imported {c10d_torch.__file__}, not the installed package")
maps = open("/proc/self/maps").read()
libs = {line.split()[-1] for line in maps.splitlines() if "libc10d.so" in line}
if not libs or not all(lib.startswith(prefix) for lib in libs):
    sys.exit(f"libc10d.so was not loaded from the prefix: {sorted(libs)}")
if "C10D" not in dist.Backend._plugins:
    sys.exit("the backend 'c10d' is not registered")

dist.init_process_group("c10d", init_method="file://" + os.path.join(os.getcwd(), "store"),
                        rank=0, world_size=1)
x = torch.arange(4, dtype=torch.float32)
dist.all_reduce(x)
assert torch.equal(x, torch.arange(4, dtype=torch.float32)), x
dist.destroy_process_group()
print("OK: c10d_torch from", c10d_torch.__file__, "with", sorted(libs)[0])
EOF
echo "torch-install-test: passed"
