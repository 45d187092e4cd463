#!/bin/sh
# The conformance suite over the TCP backend with its ranks on pretend hosts (C10D_SHM_HOST),
# checking from the set-up's log that shared memory joined exactly the ranks of each host.
#
# Usage: pretend_hosts.sh <c10drun> <c10d-conformance> <hosts> <ranks per host> <together|apart>
#                         [conformance flags...]
# together: rank r on host r / L (a host's ranks numbered together); apart: on host r % H.
# Every rank must log "<L-1> same-host peers through shared memory (hosts <map>)".
set -u
if [ $# -lt 5 ]; then
  echo "usage: $0 <c10drun> <c10d-conformance> <hosts> <ranks per host> <together|apart> ..." >&2
  exit 2
fi
c10drun=$1 conformance=$2 hosts=$3 per_host=$4 placement=$5
shift 5
n=$((hosts * per_host))
map=""
r=0
while [ $r -lt $n ]; do
  if [ "$placement" = apart ]; then h=$((r % hosts)); else h=$((r / per_host)); fi
  map="$map${map:+ }$h"
  r=$((r + 1))
done
if [ "$placement" = apart ]; then host='$((RANK % '$hosts'))'; else host='$((RANK / '$per_host'))'; fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
C10D_LOG_LEVEL=debug "$c10drun" --nproc-per-node "$n" /bin/sh -c \
  "C10D_SHM_HOST=pretend-host-$host exec \"\$0\" \"\$@\"" "$conformance" "$@" >"$log" 2>&1
status=$?
grep -v 'same-host peers' "$log"
want="$((per_host - 1)) same-host peers through shared memory (hosts $map)"
found=$(grep -c "of group default: $want" "$log")
if [ "$found" -ne "$n" ]; then
  echo "expected $n ranks to log '$want', found $found:" >&2
  grep 'same-host peers' "$log" >&2
  exit 1
fi
exit $status
