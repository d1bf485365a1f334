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
# one window of per-block instruction counts. A path has two figures per
# operation: the instructions executed at the module's own addresses (the
# module area, where perfmon.ko is the only module), and those of the
# kernel functions the module calls (the plugin's callees=on); each is the
# minimum over the batches but the first (a warm-up). Each figure is
# compared with the baseline, and the gate fails on one more than 1%
# (COST_GATE_TOLERANCE, in percent) above it, printing the path, the
# baseline and the figure, and the functions that cost most in that path.
# The callee figures of the attach, sample and fork paths, and the totals
# (the whole guest, kernel and user included), are printed, not held: on
# the debug kernel they move by up to several percent from one boot to the
# next (lockdep, KASAN's stack depot, the allocator, timer ticks). Why
# these choices: Documentation/benchmarks.rst.
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
# sample: per sample of a thread sampling its own task-clock every 100 us
#   while it spins in user mode: the soft model's timer interrupt, the
#   fold, the overflow, a buffer entry, the timer armed again.
# fork: per fork + exit + wait of a child (none: the module's fork
#   tracepoint probe alone; perfmon-inherit: a thread monitoring itself with
#   PFM_CTXFL_INHERIT, every child an heir context).
paths=ctxsw:none,ctxsw:perfmon-1,ctxsw:perfmon-4,ctxsw:perfmon-4s1,ctxsw:perfmon-smpl1
paths=$paths,read:perfmon-1,read:perfmon-4,read:perfmon-1v,read:perfmon-4v,read:perfmon-4m
paths=$paths,attach:perfmon-4-load,attach:perfmon-4-full,sample:perfmon-clock
paths=$paths,fork:none,fork:perfmon-inherit
args="--batches 7 --fifo --flush-ms 20 --trips 50 --reads 20 --attach-iters 10 --samples 20"
args="$args --inherit-iters 4 --settle-ms 0"
# The sections whose callee figures are held (the others' move with the
# kernel's state: allocations, lockdep's first-time validations).
callees_held="ctxsw read"
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
QEMU_EXTRA="-icount shift=1,sleep=off -plugin $so,marker=$marker,out=$raw,gaps=skip,callees=on ${QEMU_EXTRA:-}" \
GUEST_TIMEOUT=${GUEST_TIMEOUT:-900} \
	"$PFM_TOP/scripts/vm.sh" "$variant" cmd "$cmd" >"$gout" ||
	bail "the guest run failed (build/logs/cost-gate-latest.log; its output: $gout)"
[ -s "$raw" ] || bail "the plugin wrote no windows ($raw)"

# Symbols for the report: the kernel's (System.map) and the module's (the
# guest's /proc/kallsyms), sorted by address; c++filt names Rust's.
{
	awk '$2 ~ /^[tTwW]$/ { print $1, $3 }' "$smap"
	sed -n 's/.*PFM-KSYM \([0-9a-f]*\) [tTwW] \([^ \t]*\).*\[perfmon\].*/\1 \2/p' "$gout"
} | LC_ALL=C sort >"$out/symbols.txt"
if command -v c++filt >/dev/null 2>&1; then
	cut -d' ' -f2 "$out/symbols.txt" | c++filt | sed 's/\[[0-9a-f]\{16\}\]//g; s/pfm_core:://g' >"$out/symbols.names"
else
	cut -d' ' -f2 "$out/symbols.txt" >"$out/symbols.names"
fi

# Per path, over its batches but the first (a warm-up: first uses, the
# first arming of a timer), the module's own instructions per operation
# (min, max, batches at the min), the instructions of the kernel functions
# the module calls (the plugin's "c" lines: min, max, batches at the min),
# the guest's total (min); in report.txt also the costliest functions of
# the batch that had each min.
awk -v symfile="$out/symbols.txt" -v namefile="$out/symbols.names" \
    -v figures="$out/figures.txt" -v report="$out/report.txt" '
function sym(a,   lo, hi, mid) {
	# the last symbol at or below a (addresses as 16-digit strings)
	if (a in symof) return symof[a]
	lo = 1; hi = nsym
	if (nsym == 0 || a < saddr[1]) return "[no symbol]"
	while (lo < hi) { mid = int((lo + hi + 1) / 2); if (saddr[mid] <= a) lo = mid; else hi = mid - 1 }
	return symof[a] = sname[lo]
}
# the 8 costliest functions of window w in table tab ("m" or "c")
function top(tab, w,   n, s, i, j, b, t) {
	n = 0
	for (s in syms) if ((tab, w, s) in by) { n++; v[n] = by[tab, w, s] / iters[w]; nm[n] = s }
	for (i = 1; i <= n && i <= 8; i++) {
		b = i; for (j = i + 1; j <= n; j++) if (v[j] > v[b]) b = j
		t = v[i]; v[i] = v[b]; v[b] = t; t = nm[i]; nm[i] = nm[b]; nm[b] = t
		printf "  %10.1f  %s\n", v[i], nm[i] > report
	}
	delete v; delete nm
}
BEGIN {
	while ((getline l < symfile) > 0) { split(l, f, " "); saddr[++nsym] = f[1] }
	k = 0; while ((getline l < namefile) > 0) sname[++k] = l
}
FNR == NR {
	if (match($0, /PFM-PROF window=[0-9]+ item=[^ ]+ iterations=[0-9]+ unit=[^ ]+ batch=[0-9]+/)) {
		split(substr($0, RSTART, RLENGTH), f, /[ =]/)
		# batch 0 of every path is a warm-up: not counted
		if (f[11] == 0) next
		w = f[3]; item[w] = f[5]; iters[w] = f[7]; unit[f[5]] = f[9]
		if (!(f[5] in seen)) { seen[f[5]] = 1; order[++npaths] = f[5] }
	}
	next
}
/^#/ { next }
$1 == "c" {
	w = $2
	if (w in item) { c = $4 * $5; callee[w] += c; s = sym($3); by["c", w, s] += c; syms[s] = 1 }
	next
}
{
	w = $1; a = $2; c = $3 * $4
	if (!(w in item)) next
	tot[w] += c
	if (length(a) == 16 && a >= "ffffffffa0000000" && a < "ffffffffff000000") {
		s = sym(a); mod[w] += c; by["m", w, s] += c; syms[s] = 1
	}
}
END {
	printf "# path unit module-min module-max module-batches-at-min batches callees-min callees-max callees-batches-at-min total-min\n" > figures
	for (k = 1; k <= npaths; k++) {
		p = order[k]; mn = cmn = tmn = -1; mx = cmx = nb = 0
		for (w in item) {
			if (item[w] != p) continue
			nb++; m = mod[w] / iters[w]; cl = callee[w] / iters[w]; t = tot[w] / iters[w]
			if (mn < 0 || m < mn) { mn = m; mbest = w }
			if (cmn < 0 || cl < cmn) { cmn = cl; cbest = w }
			if (tmn < 0 || t < tmn) tmn = t
			if (m > mx) mx = m
			if (cl > cmx) cmx = cl
		}
		at = cat = 0
		for (w in item) if (item[w] == p) {
			if (mod[w] / iters[w] < mn + 0.05) at++
			if (callee[w] / iters[w] < cmn + 0.05) cat++
		}
		printf "%s %s %.1f %.1f %d %d %.1f %.1f %d %.1f\n", p, unit[p], mn, mx, at, nb, cmn, cmx, cat, tmn > figures
		printf "== %s: per %s, over %d batches: module %.1f (max %.1f, %d at the min), kernel functions it calls %.1f (max %.1f, %d at the min), guest total %.1f\n", p, unit[p], nb, mn, mx, at, cmn, cmx, cat, tmn > report
		printf " the module:\n" > report
		top("m", mbest)
		printf " the kernel functions it calls:\n" > report
		top("c", cbest)
	}
}' "$gout" "$raw" || bail "the plugin windows could not be read"
[ -s "$out/figures.txt" ] && [ "$(grep -vc '^#' "$out/figures.txt")" -gt 0 ] ||
	bail "no figures: the guest printed no PFM-PROF windows ($gout)"

elapsed=$((SECONDS - start))
if [ "$update" = 1 ]; then
	{
		echo "# The cost gate's baseline (scripts/cost-gate.sh, Documentation/benchmarks.rst):"
		echo "# per operation, on the $variant test kernel under QEMU -icount, the minimum"
		echo "# over the batches, in instructions: \"module\" those the module executes at"
		echo "# its own addresses, \"callees\" those of the kernel functions it calls"
		echo "# (\"-\": not held, attach, sample and fork paths: they vary with the kernel's state)."
		echo "# A figure more than ${tolerance}% above its line fails make check. A change"
		echo "# that must cost more updates this file in the same commit"
		echo "# (make cost-gate COST_GATE_UPDATE=1) and says why in its message."
		echo "@kernel $kernel_key"
		echo "@params $params"
		echo "# path                   unit           module    callees   (guest total, for information)"
		grep -v '^#' "$out/figures.txt" | awk -v held="$callees_held" '
			{ sec = $1; sub(/:.*/, "", sec)
			  printf "%-24s %-10s %10s %10s   # total %s\n", $1, $2, $3, (index(" " held " ", " " sec " ") ? $7 : "-"), $10 }'
	} >"$baseline"
	echo "cost-gate: baseline written: ${baseline#"$PFM_TOP"/} (${elapsed} s)" >&2
	grep -v '^[#@]' "$baseline" | sed 's/^/  /' >&2
	{ echo "ok 1 - cost gate: baseline written"; echo "1..1"; } >>"$tap"
	exit 0
fi

# The comparison: one TAP case per path of the baseline, both its figures.
awk -v tol="$tolerance" -v tap="$tap" -v report="$out/report.txt" '
function over(f, b) { return (b > 0 && f > b * (1 + tol / 100)) || (b == 0 && f > 0.5) }
function under(f, b) { return b > 0 && f < b * (1 - tol / 100) }
function pct(f, b) { return (b > 0) ? (f - b) / b * 100 : 0 }
FNR == NR { if ($0 !~ /^[#@]/ && NF >= 4) { bm[$1] = $3; bc[$1] = $4; bunit[$1] = $2; border[++nb] = $1 }; next }
/^#/ { next }
{ fm[$1] = $3; fc[$1] = $7 }
END {
	fails = 0
	for (k = 1; k <= nb; k++) {
		p = border[k]
		if (!(p in fm)) {
			printf "not ok %d - %s: not measured\n", k, p > tap
			printf "cost-gate: FAIL %s: not measured\n", p
			fails++; continue
		}
		line = sprintf("%s: per %s, module %s (baseline %s, %+.2f%%)", p, bunit[p], fm[p], bm[p], pct(fm[p], bm[p]))
		bad = over(fm[p], bm[p]); low = under(fm[p], bm[p])
		if (bc[p] != "-") {
			line = line sprintf(", kernel functions it calls %s (baseline %s, %+.2f%%)", fc[p], bc[p], pct(fc[p], bc[p]))
			bad = bad || over(fc[p], bc[p]); low = low || under(fc[p], bc[p])
		} else {
			line = line sprintf(", kernel functions it calls %s (not held)", fc[p])
		}
		if (bad) {
			printf "not ok %d - %s\n", k, line > tap
			printf "cost-gate: FAIL %s\n", line
			show = 0
			while ((getline l < report) > 0) {
				if (l ~ /^== /) show = (index(l, "== " p ":") == 1)
				else if (show) printf "cost-gate:   %s\n", l
			}
			close(report)
			fails++
		} else {
			printf "ok %d - %s\n", k, line > tap
			printf "cost-gate: ok   %s%s\n", line, low ? " (below the baseline: COST_GATE_UPDATE=1 to lower it)" : ""
		}
	}
	printf "1..%d\n", nb > tap
	exit fails > 0
}' "$baseline" "$out/figures.txt" >&2 && rc=0 || rc=1
if [ "$rc" = 0 ]; then
	echo "cost-gate: ok, no figure above its baseline by more than ${tolerance}% (${elapsed} s; ${out#"$PFM_TOP"/}/report.txt)" >&2
else
	echo "cost-gate: FAILED: a figure is more than ${tolerance}% above ${baseline#"$PFM_TOP"/} (${elapsed} s; ${out#"$PFM_TOP"/}/report.txt). A change that must cost more: make cost-gate COST_GATE_UPDATE=1, commit the baseline with it, and say why" >&2
	[ "$base_kernel" = "$kernel_key" ] ||
		echo "cost-gate: note: the baseline was made on the test kernel ${base_kernel:-?}, this is $kernel_key (another config or toolchain: the module's code may differ)" >&2
fi
exit "$rc"
