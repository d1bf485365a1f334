#!/usr/bin/env bash
# The cost gate of `make check` (issue 35; Documentation/benchmarks.rst,
# "The cost gate"): the instructions the module itself executes per
# operation on its hot paths, held to tests/bench/cost-baseline.txt.
#
# Boots the test kernel of VARIANT (default debug: the kernel `make check`
# has already built) from a small image of its own (pfm_bench and the
# module, no tests) under QEMU -icount with the pfm_prof TCG plugin
# (tests/bench/qemu-prof/pfm_prof.c), and runs
# `pfm_bench --profile PATHS --batches N --fifo ...`: every path runs N
# batches, each between two getcpu(2) markers, which the plugin turns into
# one window of per-block instruction counts. A path's figure is the
# instructions executed at the module's own addresses (the module area,
# where perfmon.ko is the only module) per operation, the minimum over its
# batches; each figure is compared with the baseline, and the gate fails on
# one more than 1% (COST_GATE_TOLERANCE, in percent) above it, printing the
# path, the baseline and the figure, and the module's functions that cost
# most in that path. Totals (the whole guest, kernel and user included) are
# printed beside them, not gated: on the debug kernel they move by several
# percent from one boot to the next (lockdep, KASAN's stack depot, timer
# ticks). Why these choices: Documentation/benchmarks.rst.
#
# Writes build/cost-gate/: figures.txt (every path's figures), report.txt
# (the same, and each path's costliest module functions), guest.out (the
# guest's output), prof.raw (the plugin's windows); and the TAP of the
# comparison, one case per path, to build/logs/cost-gate.tap (make check
# counts it, scripts/check-log.sh --tap). Exit status 1 if a figure rose
# (or the run failed), 0 otherwise.
#
# usage: cost-gate.sh [VARIANT]
# env:   COST_GATE_UPDATE=1   write the figures to the baseline instead of
#                             comparing (a change that must cost more: commit
#                             the new baseline with it, and say why)
#        COST_BASELINE        the baseline (default tests/bench/cost-baseline.txt;
#                             its "@kernel" line names the cached test kernel
#                             it was made on, "@params" what was measured:
#                             other @params fail the gate; KDIR=... skips it)
#        COST_GATE_TOLERANCE  percent above the baseline that passes (default 1)
#        QEMU_SMP, QEMU_EXTRA, GUEST_TIMEOUT (default 900) as for scripts/vm.sh
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:-debug}
baseline=${COST_BASELINE:-$PFM_TOP/tests/bench/cost-baseline.txt}
tolerance=${COST_GATE_TOLERANCE:-1}
update=${COST_GATE_UPDATE:-0}

# What is measured. Changing any of it changes the figures: the baseline
# records it ("@params") and the gate refuses a baseline made otherwise.
# ctxsw: per switch of a two-thread pipe ping-pong on one CPU, both threads
#   monitoring themselves (perfmon-1, perfmon-4: 1 and 4 soft counters;
#   perfmon-4s1: the same 4 in an event set table of one set;
#   perfmon-smpl1: sampling their own switches with period 1, an overflow
#   and a sampling buffer entry at every switch); ctxsw:none is the module
#   loaded and unused (its figure is 0: nothing of the module runs).
# read: per read of the own counters (READ_PMDS 1/4, READ_VALUES 1v/4v, the
#   mapped page 4m: no system call, so its module figure is 0 and its total
#   the library's reading).
# attach: per cycle on a sleeping thread of the other CPU (4-load: LOAD,
#   START, STOP, UNLOAD of a programmed context; 4-full: with open, program
#   and close).
# fork: per fork + exit + wait of a child (none: the module's fork
#   tracepoint probe alone; perfmon-inherit: a thread monitoring itself with
#   PFM_CTXFL_INHERIT, every child an heir context).
paths=ctxsw:none,ctxsw:perfmon-1,ctxsw:perfmon-4,ctxsw:perfmon-4s1,ctxsw:perfmon-smpl1
paths=$paths,read:perfmon-1,read:perfmon-4,read:perfmon-1v,read:perfmon-4v,read:perfmon-4m
paths=$paths,attach:perfmon-4-load,attach:perfmon-4-full,fork:none,fork:perfmon-inherit
args="--batches 5 --fifo --flush-ms 20 --trips 50 --reads 100 --attach-iters 10 --inherit-iters 10 --settle-ms 0"
params="$paths $args"

out=$PFM_BUILD/cost-gate
tap=$PFM_BUILD/logs/cost-gate.tap
mkdir -p "$out" "${tap%/*}"
: >"$tap"
# Any failure before the comparison is one TAP failure ("Bail out!").
bail() {
	echo "cost-gate: FAIL: $*" >&2
	{ echo "not ok 1 - cost gate: $*"; echo "Bail out! $*"; } >>"$tap"
	exit 1
}

# The figures are those of one kernel build and one toolchain (the module's
# code is the compiler's): the baseline names the cached test kernel it was
# made on (scripts/env.sh's key: kernel version, config fragments, LLVM,
# rustc, bindgen); on another one the figures are still compared (the key
# also changes with things that leave the module's code alone), and a failure
# says that the kernel differs. Another kernel tree (KDIR) is not compared:
# one skipped case.
kdir=$(pfm_kernel_dir "$variant")
kernel_key=${kdir##*/}
if [ -n "${KDIR:-}" ] && [ "$update" != 1 ]; then
	echo "cost-gate: skipped: KDIR=$KDIR is not the $variant test kernel the baseline is for" >&2
	{ echo "ok 1 - cost gate # SKIP KDIR given: the baseline is for the project's $variant test kernel"; echo "1..1"; } >>"$tap"
	exit 0
fi
kdir=${KDIR:-$kdir}
smap=$kdir/System.map
[ -f "$smap" ] || bail "no $smap (make kernel VARIANT=$variant)"
marker=$(awk '$3 == "__x64_sys_getcpu" { print "0x" $1 }' "$smap")
[ -n "$marker" ] || bail "no __x64_sys_getcpu in $smap"
[ "$update" = 1 ] || [ -f "$baseline" ] || bail "no baseline $baseline (COST_GATE_UPDATE=1 writes one)"
if [ "$update" != 1 ]; then
	want=$(sed -n 's/^@params //p' "$baseline")
	[ "$want" = "$params" ] || bail "$baseline was made with other paths or counts (@params): make it again with COST_GATE_UPDATE=1"
	base_kernel=$(sed -n 's/^@kernel //p' "$baseline")
fi

so=$out/pfm_prof.so
cc=${CC:-$(command -v cc || command -v gcc || command -v "clang$PFM_LLVM")}
"$cc" -shared -fPIC -O2 -Wall -o "$so" "$PFM_TOP/tests/bench/qemu-prof/pfm_prof.c" ||
	bail "the plugin did not build"
image=$out/initramfs.cpio.gz
PFM_IMAGE=$image PFM_IMAGE_TESTS=none "$PFM_TOP/scripts/initramfs.sh" "$variant" >/dev/null 2>"$out/initramfs.log" ||
	bail "the image did not build ($out/initramfs.log)"
[ -f "$image" ] || bail "no image $image"

raw=$out/prof.raw gout=$out/guest.out
rm -f "$raw" "$gout"
echo "cost-gate: the $variant kernel, -icount, $(echo "$paths" | tr ',' ' ' | wc -w) paths ($args)" >&2
start=$SECONDS
# kmemleak=off: no scans at the end (they take a minute of this kernel);
# randomize_va_space=0: the same addresses, so the same page tables, in
# every boot; sched_rt_runtime_us=-1: SCHED_FIFO (--fifo) is never
# throttled, which would let other work in at a varying point.
cmd="echo 0 >/proc/sys/kernel/randomize_va_space && echo -1 >/proc/sys/kernel/sched_rt_runtime_us &&"
cmd="$cmd /bin/pfm_bench --profile $paths $args"
PFM_INITRD=$image PFM_LOG_JOB=cost-gate PFM_CMDLINE="kmemleak=off ${PFM_CMDLINE:-}" \
QEMU_EXTRA="-icount shift=1,sleep=off -plugin $so,marker=$marker,out=$raw,gaps=skip ${QEMU_EXTRA:-}" \
GUEST_TIMEOUT=${GUEST_TIMEOUT:-900} \
	"$PFM_TOP/scripts/vm.sh" "$variant" cmd "$cmd" >"$gout" ||
	bail "the guest run failed (build/logs/cost-gate-latest.log; its output: $gout)"
[ -s "$raw" ] || bail "the plugin wrote no windows ($raw)"

# The module's functions, sorted, for the report (c++filt names them when
# it is there).
sed -n 's/.*PFM-KSYM \([0-9a-f]*\) [tTwW] \([^ \t]*\).*\[perfmon\].*/\1 \2/p' "$gout" | sort >"$out/ksyms.txt"
if command -v c++filt >/dev/null 2>&1; then
	cut -d' ' -f2 "$out/ksyms.txt" | c++filt | sed 's/\[[0-9a-f]\{16\}\]//g; s/pfm_core:://g' >"$out/ksyms.names"
else
	cut -d' ' -f2 "$out/ksyms.txt" >"$out/ksyms.names"
fi

# Per path: the module's instructions per operation (min and max over the
# batches, and how many batches had the min), the guest's total (min), and
# the top module functions of the min batch.
awk -v symfile="$out/ksyms.txt" -v namefile="$out/ksyms.names" \
    -v figures="$out/figures.txt" -v report="$out/report.txt" '
function sym(a,   lo, hi, mid) {
	# the last module symbol at or below a (addresses as 16-digit strings)
	lo = 1; hi = nsym
	if (nsym == 0 || a < saddr[1]) return "[module, no symbol]"
	while (lo < hi) { mid = int((lo + hi + 1) / 2); if (saddr[mid] <= a) lo = mid; else hi = mid - 1 }
	return sname[lo]
}
BEGIN {
	while ((getline l < symfile) > 0) { split(l, f, " "); saddr[++nsym] = f[1] }
	k = 0; while ((getline l < namefile) > 0) sname[++k] = l
}
FNR == NR {
	if (match($0, /PFM-PROF window=[0-9]+ item=[^ ]+ iterations=[0-9]+ unit=[^ ]+ batch=[0-9]+/)) {
		split(substr($0, RSTART, RLENGTH), f, /[ =]/)
		w = f[3]; item[w] = f[5]; iters[w] = f[7]; unit[f[5]] = f[9]
		if (!(f[5] in seen)) { seen[f[5]] = 1; order[++npaths] = f[5] }
	}
	next
}
/^#/ { next }
{
	w = $1; a = $2; c = $3 * $4
	if (!(w in item)) next
	tot[w] += c
	if (length(a) == 16 && a >= "ffffffffa0000000" && a < "ffffffffff000000") {
		if (!(a in symof)) symof[a] = sym(a)
		s = symof[a]; mod[w] += c; bysym[w, s] += c; syms[s] = 1
	}
}
END {
	printf "# path unit module-min module-max batches-at-min batches total-min\n" > figures
	for (k = 1; k <= npaths; k++) {
		p = order[k]; mn = -1; mx = -1; tmn = -1; nb = 0
		for (w in item) {
			if (item[w] != p) continue
			nb++; m = mod[w] / iters[w]; t = tot[w] / iters[w]
			if (mn < 0 || m < mn) { mn = m; best[p] = w }
			if (m > mx) mx = m
			if (tmn < 0 || t < tmn) tmn = t
		}
		at = 0
		for (w in item) if (item[w] == p && mod[w] / iters[w] < mn + 0.05) at++
		printf "%s %s %.1f %.1f %d %d %.1f\n", p, unit[p], mn, mx, at, nb, tmn > figures
		printf "== %s: %.1f module instructions per %s (max %.1f over %d batches, %d at the min); guest total %.1f\n", p, mn, unit[p], mx, nb, at, tmn > report
		w = best[p]; n = 0
		for (s in syms) if ((w, s) in bysym) { n++; v[n] = bysym[w, s] / iters[w]; nm[n] = s }
		# top 8 by a selection sort (few symbols)
		for (i = 1; i <= n && i <= 8; i++) {
			b = i; for (j = i + 1; j <= n; j++) if (v[j] > v[b]) b = j
			t = v[i]; v[i] = v[b]; v[b] = t; t = nm[i]; nm[i] = nm[b]; nm[b] = t
			printf "  %10.1f  %s\n", v[i], nm[i] > report
		}
		delete v; delete nm
	}
}' "$gout" "$raw" || bail "the plugin windows could not be read"
[ -s "$out/figures.txt" ] && [ "$(grep -vc '^#' "$out/figures.txt")" -gt 0 ] ||
	bail "no figures: the guest printed no PFM-PROF windows ($gout)"

elapsed=$((SECONDS - start))
if [ "$update" = 1 ]; then
	{
		echo "# The cost gate's baseline (scripts/cost-gate.sh, Documentation/benchmarks.rst):"
		echo "# instructions the module executes at its own addresses per operation, on the"
		echo "# $variant test kernel under QEMU -icount; the minimum over the batches."
		echo "# A figure more than ${tolerance}% above its line fails make check. A change"
		echo "# that must cost more updates this file in the same commit"
		echo "# (COST_GATE_UPDATE=1 make cost-gate) and says why in its message."
		echo "@kernel $kernel_key"
		echo "@params $params"
		echo "# path unit module-instructions (guest total, for information)"
		grep -v '^#' "$out/figures.txt" | awk '{ printf "%-24s %-10s %10s   # total %s\n", $1, $2, $3, $7 }'
	} >"$baseline"
	echo "cost-gate: baseline written: ${baseline#"$PFM_TOP"/} (${elapsed} s)" >&2
	grep -v '^#' "$out/figures.txt" | awk '{ printf "  %-24s %10s per %s\n", $1, $3, $2 }' >&2
	{ echo "ok 1 - cost gate: baseline written"; echo "1..1"; } >>"$tap"
	exit 0
fi

# The comparison: one TAP case per path of the baseline.
awk -v tol="$tolerance" -v tap="$tap" -v report="$out/report.txt" '
FNR == NR { if ($0 !~ /^[#@]/ && NF >= 3) { base[$1] = $3; bunit[$1] = $2; border[++nb] = $1 }; next }
/^#/ { next }
{ fig[$1] = $3; fmax[$1] = $4; at[$1] = $5; bat[$1] = $6; tot[$1] = $7 }
END {
	fails = 0
	for (k = 1; k <= nb; k++) {
		p = border[k]; b = base[p]
		if (!(p in fig)) {
			printf "not ok %d - %s: no figure (baseline %s)\n", k, p, b > tap
			printf "cost-gate: FAIL %s: not measured (baseline %s)\n", p, b
			fails++; continue
		}
		f = fig[p]
		rise = (b > 0) ? (f - b) / b * 100 : (f > 0 ? 100 : 0)
		line = sprintf("%s: %s module instructions per %s, baseline %s (%+.2f%%)", p, f, bunit[p], b, rise)
		if ((b > 0 && f > b * (1 + tol / 100)) || (b == 0 && f > 0.5)) {
			printf "not ok %d - %s\n", k, line > tap
			printf "cost-gate: FAIL %s\n", line
			# the path costliest module functions (report.txt)
			show = 0
			while ((getline l < report) > 0) {
				if (l ~ /^== /) show = (index(l, "== " p ":") == 1)
				else if (show) printf "cost-gate:   %s\n", l
			}
			close(report)
			fails++
		} else {
			printf "ok %d - %s\n", k, line > tap
			printf "cost-gate: ok   %s%s\n", line, (b > 0 && f < b * (1 - tol / 100)) ? " (below the baseline: COST_GATE_UPDATE=1 to lower it)" : ""
		}
	}
	printf "1..%d\n", nb > tap
	exit fails > 0
}' "$baseline" "$out/figures.txt" >&2 && rc=0 || rc=1
if [ "$rc" = 0 ]; then
	echo "cost-gate: ok, no path above its baseline by more than ${tolerance}% (${elapsed} s; ${out#"$PFM_TOP"/}/report.txt)" >&2
else
	echo "cost-gate: FAILED: a path costs more than ${tolerance}% above ${baseline#"$PFM_TOP"/} (${elapsed} s; ${out#"$PFM_TOP"/}/report.txt). A change that must cost more: COST_GATE_UPDATE=1 make cost-gate, commit the baseline with it, and say why" >&2
	[ "$base_kernel" = "$kernel_key" ] ||
		echo "cost-gate: note: the baseline was made on the test kernel ${base_kernel:-?}, this is $kernel_key (another config or toolchain: the module's code may differ)" >&2
fi
exit "$rc"
