#!/usr/bin/env bash
# `make bench-profile`: where the guest's instructions go, per switch, per
# read, per attach cycle, function by function. Boots the fast kernel under
# QEMU -icount with the pfm_prof plugin (pfm_prof.c), runs
# `pfm_bench --profile ITEMS` (each item's loop between two getcpu(2)
# markers) and symbolizes the counts (symbolize.py) with the kernel's
# System.map and the module's /proc/kallsyms. Writes
# build/bench/profile-TIMESTAMP.{txt,json} (and .raw, .out: the plugin
# dump and the guest output) and prints the report.
#
# env: PROFILE_ITEMS  SECTION:VARIANT,... (default below; sections ctxsw,
#                     read: none, perfmon-1, perfmon-4, perfmon-1v, perfmon-4v (READ_VALUES), perf-1, perf-3,
#                     perf-4; ctxsw also the event sets' perfmon-4s1 (one set,
#                     with a table), perfmon-2x4 (2 sets multiplexed every
#                     1 ms), perfmon-2x4f (every 100 us), perf-8; attach:
#                     perfmon-1-full, perfmon-4-full, perfmon-4-load, perf-1, perf-3, perf-4)
#      PROFILE_ARGS   pfm_bench iteration counts (default
#                     --trips 20000 --reads 20000 --attach-iters 500)
#      PROFILE_BASES  items to diff against (default ctxsw:none read:perf-4 attach:perf-4)
#      KDIR, QEMU_SMP, ... as for scripts/vm.sh
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/../../.." && pwd)
. "$PFM_TOP/scripts/env.sh"

here=$PFM_TOP/tests/bench/qemu-prof
kdir=${KDIR:-$(pfm_kernel_dir fast)}
smap=$kdir/System.map
[ -f "$smap" ] || { echo "bench-profile: no $smap (make kernel VARIANT=fast)" >&2; exit 1; }
marker=$(awk '$3 == "__x64_sys_getcpu" { print "0x" $1 }' "$smap")
[ -n "$marker" ] || { echo "bench-profile: no __x64_sys_getcpu in $smap" >&2; exit 1; }
items=${PROFILE_ITEMS:-ctxsw:none,ctxsw:perfmon-1,ctxsw:perfmon-4,ctxsw:perfmon-4s1,ctxsw:perfmon-2x4,ctxsw:perf-1,ctxsw:perf-4,read:perfmon-1,read:perfmon-4,read:perf-1,read:perf-4,attach:perfmon-4-full,attach:perfmon-4-load,attach:perf-4}
args=${PROFILE_ARGS:---trips 20000 --reads 20000 --attach-iters 500}
bases=${PROFILE_BASES:-ctxsw:none read:perf-4 attach:perf-4}

out=$PFM_BUILD/bench
mkdir -p "$out"
ts=$(date +%Y%m%d-%H%M%S)
so=$out/pfm_prof.so
cc=${CC:-$(command -v cc || command -v gcc || command -v "clang$PFM_LLVM")}
"$cc" -shared -fPIC -O2 -Wall -o "$so" "$here/pfm_prof.c"

raw=$out/profile-$ts.raw
gout=$out/profile-$ts.out
echo "bench-profile: $items ($args), plugin dump $raw" >&2
QEMU_EXTRA="-icount shift=1,sleep=off -plugin $so,marker=$marker,out=$raw ${QEMU_EXTRA:-}" \
GUEST_TIMEOUT=${GUEST_TIMEOUT:-3600} \
	"$PFM_TOP/scripts/vm.sh" fast cmd "/bin/pfm_bench --profile $items $args" >"$gout"

base_args=()
for b in $bases; do base_args+=(--base "$b"); done
python3 "$here/symbolize.py" "$raw" "$smap" "$gout" "${base_args[@]}" --json "$out/profile-$ts.json" \
	| tee "$out/profile-$ts.txt"
echo "bench-profile: report in $out/profile-$ts.txt, JSON in $out/profile-$ts.json" >&2
