#!/usr/bin/env bash
# `make bench`: boots the test kernel of VARIANT (default fast) under QEMU,
# runs tests/bench's pfm_bench in it (perfmon against perf_event: switch
# overhead, read latency, attach cost, memory; Documentation/benchmarks.rst),
# prints its tables and saves its JSON as build/bench/bench-TIMESTAMP.json
# (bench-latest.json points at the newest; bench-TIMESTAMP.out keeps the
# whole output, per-round progress included).
#
# usage: bench.sh [VARIANT]
# env:   BENCH_ICOUNT  QEMU -icount setting (default shift=1,sleep=off: guest
#                      time then depends only on executed instructions, so
#                      the figures repeat to within a fraction of a percent);
#                      0 (or off) for plain TCG, whose timings are noisy
#        BENCH_ARGS    more pfm_bench arguments, e.g. --quick, --rounds 3,
#                      --only ctxsw,read (pfm_bench --help lists them)
#        BENCH_COMMIT  what the JSON names as the code measured (default: git
#                      HEAD, "+changes" when the tree differs from it)
#        QEMU_EXTRA, QEMU_SMP, QEMU_MEM, KDIR ... as for scripts/vm.sh;
#        GUEST_TIMEOUT defaults to 3600 s here
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:-fast}
icount=${BENCH_ICOUNT-shift=1,sleep=off}
case $icount in
0|off|no|"") icount_args=""; label="tcg" ;;
*)           icount_args="-icount $icount"; label="tcg -icount $icount" ;;
esac
label="$label -smp ${QEMU_SMP:-2}${QEMU_EXTRA:+ $QEMU_EXTRA}"
export QEMU_EXTRA="$icount_args ${QEMU_EXTRA:-}"
export GUEST_TIMEOUT=${GUEST_TIMEOUT:-3600}
if [ -n "${BENCH_COMMIT:-}" ]; then
	commit=$BENCH_COMMIT
else
	commit=$(git -C "$PFM_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
	git -C "$PFM_TOP" diff --quiet HEAD -- 2>/dev/null || commit="$commit+changes"
fi

outdir=$PFM_BUILD/bench
mkdir -p "$outdir"
ts=$(date +%Y%m%d-%H%M%S)
raw=$outdir/bench-$ts.out
json=$outdir/bench-$ts.json

echo "bench: $variant kernel, $label, pfm_bench ${BENCH_ARGS:-}(the guest prints its results when it is done)" >&2
set +e
"$PFM_TOP/scripts/vm.sh" "$variant" cmd \
	"/bin/pfm_bench --qemu '$label' --commit '$commit' ${BENCH_ARGS:-}" >"$raw"
rc=$?
set -e

# The tables, without the per-round progress ("# ...") and the JSON.
awk '/^PFM-BENCH-JSON-BEGIN$/ { j = 1; next } /^PFM-BENCH-JSON-END$/ { j = 0; next }
     !j && !/^# / { print }' "$raw"
sed -n '/^PFM-BENCH-JSON-BEGIN$/,/^PFM-BENCH-JSON-END$/p' "$raw" | sed '1d;$d' >"$json"
if [ -s "$json" ]; then
	ln -sfn "${json##*/}" "$outdir/bench-latest.json"
	echo "bench: JSON in $json, whole output in $raw" >&2
else
	rm -f "$json"
	echo "bench: FAIL: no JSON in the output ($raw)" >&2
	[ "$rc" != 0 ] || rc=1
fi
exit "$rc"
