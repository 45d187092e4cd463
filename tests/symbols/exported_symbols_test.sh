#!/usr/bin/env bash
# libc10d.so exports only names of namespace c10d::v1, and none that libtorch also defines.
#
# libtorch's C++ namespace is c10d too: a symbol both libraries export (a mangled name, a vtable,
# a type_info) binds, in a process that loads both (c10d_torch, docs/torch.md), to whichever
# library the dynamic linker finds first. Ours are c10d::v1's (the inline namespace), so they
# cannot equal torch's; this test checks that nothing else is exported either: no internals, no
# instantiations of std, fmt or Boost templates, any of which libtorch may define as well.
#
# Usage: exported_symbols_test.sh <libc10d.so> [<directory of libtorch_cpu.so>]
# Exits 77 (skipped) after the namespace check when libtorch_cpu.so is not there.
set -euo pipefail

if (($# < 1 || $# > 2)); then
  echo "usage: $0 <libc10d.so> [<directory of libtorch_cpu.so>]" >&2
  exit 2
fi
lib=$1
torch_dir=${2:-}

# Defined in every shared object by the linker, not by our code.
unavoidable='^(_init|_fini|__bss_start|_edata|_end)$'

defined() {
  nm -D --defined-only --format=posix "$1" | awk '{print $1}' | grep -Ev "$unavoidable" |
    LC_ALL=C sort -u
}
list() {
  c++filt | sed -n 's/^/  /; 1,50p'
}

ours=$(defined "$lib")
if [[ -z "$ours" ]]; then
  echo "FAIL: $lib exports nothing" >&2
  exit 1
fi
echo "$lib exports $(wc -l <<<"$ours") symbols"
status=0

# Names in c10d::v1, as the Itanium C++ ABI mangles them: functions and variables (_ZN, const or
# ref-qualified members _ZNK _ZNR _ZNO), vtables, VTTs, type_info objects and names (_ZTV _ZTT
# _ZTI _ZTS), thunks (_ZTh, _ZTv), statics of inline functions and guards (_ZZN, _ZGV),
# thread_local wrappers (_ZTW, _ZTH).
in_ours='^_Z(N[KRO]*|T[VTISWH]N|Th[^_]*_NK?|Tv[^_]*_[^_]*_NK?|ZNK?|GVZ?NK?)4c10d2v1'
outside=$(grep -Ev "$in_ours" <<<"$ours" || true)
if [[ -n "$outside" ]]; then
  echo "FAIL: $lib exports $(wc -l <<<"$outside") symbols outside namespace c10d::v1" \
       "(first 50; src/c10d.map and include/c10d/export.h say what is exported):" >&2
  list <<<"$outside" >&2
  status=1
fi

torch_libs=(libtorch_cpu.so libtorch_python.so libc10.so libtorch.so)
if [[ -z "$torch_dir" || ! -f "$torch_dir/libtorch_cpu.so" ]]; then
  if ((status == 0)); then
    echo "SKIP: libtorch_cpu.so not found (${torch_dir:-no directory given}; libtorch-dev" \
         "installs it): exports checked against namespace c10d::v1 only"
    exit 77
  fi
  exit "$status"
fi
for t in "${torch_libs[@]}"; do
  [[ -f "$torch_dir/$t" ]] || continue
  both=$(LC_ALL=C comm -12 <(echo "$ours") <(defined "$torch_dir/$t"))
  if [[ -n "$both" ]]; then
    echo "FAIL: $(wc -l <<<"$both") symbols defined by both $lib and $torch_dir/$t" \
         "(first 50):" >&2
    list <<<"$both" >&2
    status=1
  else
    echo "no symbol defined by both $lib and $t"
  fi
done
if ((status == 0)); then
  echo "PASS"
fi
exit "$status"
