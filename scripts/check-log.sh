#!/usr/bin/env bash
# Judges a guest console log written by scripts/vm.sh (see the PFM- markers in
# scripts/guest-init.sh): the TAP of every guest test, kernel splats, kmemleak
# reports, module unload, taint, and whether the guest finished at all.
# Optionally adds the counts of a host `cargo test` log (scripts/host-test.sh).
#
# usage: check-log.sh [--host HOSTLOG] [--tap TAPFILE]... [--quiet] CONSOLE_LOG...
#   --quiet  print only problems and no summary (used by vm.sh for run/cmd jobs)
#   --tap    a host-side TAP file to count too (scripts/install-test.sh's):
#            each ok/not ok is one case; a Bail out!, a missing file or
#            fewer results than its plan add one failure
# Several console logs (make check: the guest tests', then the install
# test's guest) are judged one by one, into the one summary line.
# Prints each test's result and every problem found, then exactly one summary
# line "N passed, N failed, N skipped". Exit status 1 on any failure.
# Counting: every TAP test case is one; a test binary without any TAP case counts
# as one case judged by its exit status (0 pass, 4 skip, else fail). A binary's
# own problems (exit status != 0/4 without a `not ok`, fewer results than its
# plan, per-test timeout, never finished) add one failure to it; each kernel
# splat, kmemleak report, bad taint, failed rmmod or guest crash adds one more.
# Kernel splats are only looked for in kernel lines ("[  12.345678] ..."), so
# a test that merely prints the word WARNING does not trip them. A splat is
# quoted with up to 80 of the kernel lines that follow it: a lockdep report's
# held locks and call trace, which CI keeps only in this summary. Leaks are
# judged from the kmemleak report the guest prints after its last test (the
# console's "N new suspected memory leaks" of an earlier scan is in it too).
# One kernel leak is known and not the module's: 6.12's sysfs_slab_add
# (mm/slub.c) does not kobject_put() when kobject_init_and_add() fails, so
# the kobject's name leaks; pfm_test_failnth's fault injection makes the
# module's kmem_cache_create() fail exactly there. Its records (that test,
# that backtrace) are counted and printed, not failed.
# bash + awk only (mawk-compatible): python3 is not on a fresh machine.
set -euo pipefail

host= quiet=0 taps=()
while [ $# -gt 1 ]; do
	case $1 in
	--host) host=$2; shift 2 ;;
	--tap) taps+=("$2"); shift 2 ;;
	--quiet) quiet=1; shift ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || { echo "usage: check-log.sh [--host HOSTLOG] [--tap TAPFILE]... [--quiet] CONSOLE_LOG..." >&2; exit 2; }
if [ $# -gt 1 ] || [ ${#taps[@]} -gt 0 ]; then
	# Each part judged alone (its own lines and counts), then one summary.
	P=0 F=0 S=0
	add() { P=$((P + $1)); F=$((F + $2)); S=$((S + $3)); }
	for t in "${taps[@]}"; do
		if [ ! -f "$t" ]; then
			echo "FAIL $t: no such TAP file (the step did not run)"; add 0 1 0; continue
		fi
		read -r p f sk bail plan < <(awk '
			/^ok / { if (toupper($0) ~ /# *(SKIP|TODO)/) s++; else p++ }
			/^not ok / { f++ }
			/^Bail out!/ { b = 1 }
			/^1\.\.[0-9]+/ { plan = substr($1, 4) + 0 }
			END { print p + 0, f + 0, s + 0, b + 0, plan + 0 }' "$t")
		why=
		[ "$bail" = 0 ] || { why="$why; bailed out: $(sed -n 's/^Bail out! //p' "$t")"; [ "$f" != 0 ] || f=1; }
		if [ "$bail" = 0 ] && [ $((p + f + sk)) -lt "$plan" ]; then why="$why; planned $plan"; f=$((f + 1)); fi
		[ "$bail" = 1 ] || [ "$plan" != 0 ] || { why="$why; no plan (did not finish)"; f=$((f + 1)); }
		[ "$quiet" = 1 ] || printf '%s %s: %d passed, %d failed, %d skipped%s\n' \
			"$([ "$f" = 0 ] && echo 'ok  ' || echo FAIL)" "$(basename "$t")" "$p" "$f" "$sk" "$why"
		[ "$quiet" = 1 ] || awk '/^not ok / { print "    " $0; d = 1; next } d && /^# / { print "      " $0; next } { d = 0 }' "$t"
		add "$p" "$f" "$sk"
	done
	first=1
	for l in "$@"; do
		set +e
		if [ $first = 1 ] && [ -n "$host" ]; then
			out=$("$0" --host "$host" "$l")
		else
			out=$("$0" "$l")
		fi
		set -e
		first=0
		counts=$(echo "$out" | tail -n 1)
		[ "$quiet" = 1 ] || echo "$out" | sed '$d'
		read -r p _ f _ sk _ <<<"$counts"
		add "${p:-0}" "${f:-1}" "${sk:-0}"
	done
	[ "$quiet" = 1 ] || echo "$P passed, $F failed, $S skipped"
	[ "$F" = 0 ]
	exit
fi
log=$1
[ -f "$log" ] || { echo "check-log: no console log $log (the guest did not run)"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

# Host cargo test: sum the "test result:" lines of every test binary.
hp=0 hf=0 hs=0 hnote=
if [ -n "$host" ]; then
	if [ ! -f "$host" ]; then
		hf=1 hnote="host tests: no log $host"
	else
		read -r hp hf hs hrc hnone < <(awk '
			/^test result:/ { for (i = 1; i <= NF; i++) {
				if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i
				if ($(i+1) ~ /^ignored/) s += $i } }
			/^PFM-HOST-TEST rc=/ { sub(/^PFM-HOST-TEST rc=/, ""); rc = $1 + 0 }
			/^PFM-HOST-TEST none/ { none = 1 }
			END { print p + 0, f + 0, s + 0, rc + 0, none + 0 }' "$host")
		if [ "$hnone" = 1 ]; then
			hnote="host tests: none (no Cargo workspace yet)"
		else
			hnote="host tests (cargo test): $hp passed, $hf failed, $hs ignored"
			if [ "$hrc" != 0 ] && [ "$hf" = 0 ]; then
				hf=1 hnote="$hnote; cargo test exited $hrc (build error?), see $host"
			fi
		fi
	fi
	echo "$hnote"
	grep -E '^test .* \.\.\. FAILED$' "$host" | sed 's/^/    /' || true
fi

tr -d '\r' <"$log" | awk -v quiet="$quiet" -v hp="$hp" -v hf="$hf" -v hs="$hs" -v logname="$log" '
function problem(msg) { nprob++; probs[nprob] = msg }
function iskernel(s) { return s ~ /\[ *[0-9]+\.[0-9]+\]/ }
function leak_end() {   # one kmemleak record read: known kernel leak or a problem
	if (leak == "") return
	if (leak ~ /comm "pfm_test_failnt"/ && leak ~ /kobject_init_and_add/ && leak ~ /sysfs_slab_add/ && leak ~ /__kmem_cache_create_args/)
		knownleak++
	else
		problem("kmemleak: " leak)
	leak = ""
}
function field(s, key,   r) {   # value of key=VALUE in s
	if (!match(s, key "=[^ ]*")) return ""
	return substr(s, RSTART + length(key) + 1, RLENGTH - length(key) - 1)
}
BEGIN {
	splat = "BUG:|WARNING:|Oops|general protection fault|KASAN|UBSAN|" \
		"possible circular locking|possible recursive locking|inconsistent lock state|" \
		"suspicious RCU usage|rcu_.* detected stall|rust_kernel: panicked|Kernel panic|" \
		"kernel BUG|kmemleak:.*unreferenced|blocked for more than"
	split("P:proprietary module,F:module force-loaded,S:out-of-spec system,R:module force-unloaded," \
		"M:machine check,B:bad page,U:user request,D:kernel died (oops),A:ACPI table overridden," \
		"W:kernel warning,C:staging driver,I:firmware workaround,O:out-of-tree module," \
		"E:unsigned module,L:soft lockup,K:live patched,X:auxiliary,T:randstruct,N:test module", tflag, ",")
	allowed[12] = 1; allowed[18] = 1   # O (4096) and N (262144)
	cur = ""; inleak = 0; ctx = 0
}
# ---- kernel splats: one per run of consecutive kernel lines ----
iskernel($0) && $0 ~ splat {
	if (!insplat) {
		insplat = 1; ctx = 80; nsplat++
		where = (cur != "") ? " during test " cur : (mode != "" && mode != "check" ? " during the " mode " job" : "")
		problem("kernel splat" where " (console line " NR "):"); sidx = nprob
	}
}
!iskernel($0) { insplat = 0; ctx = 0 }
ctx > 0 && iskernel($0) { probs[sidx] = probs[sidx] "\n    " $0; ctx-- }
# ---- markers ----
/PFM-BOOTED / { booted = 1; mode = field($0, "mode") }
/PFM-TEST-BEGIN / { sub(/.*PFM-TEST-BEGIN /, ""); cur = $1; ntest++; tname[ntest] = cur; tidx[cur] = ntest; next }
/PFM-OUT-BEGIN / { sub(/.*PFM-OUT-BEGIN /, ""); out = $1; next }
/PFM-OUT-END / { out = ""; next }
/PFM-TIMEOUT / { sub(/.*PFM-TIMEOUT /, ""); timedout[$1] = $3; next }
/PFM-TEST-END / {
	sub(/.*PFM-TEST-END /, ""); n = tidx[$1]
	if (n) { ended[n] = 1; rc[n] = field($0, "rc") + 0 }
	cur = ""; next
}
/PFM-RMMOD-FAIL/ { problem("rmmod perfmon failed (" $0 ")"); next }
/PFM-ERROR/ { problem($0); next }
/PFM-KMEMLEAK-ERROR/ { problem($0); next }
/PFM-KMEMLEAK-BEGIN/ { inleak = 1; next }
/PFM-KMEMLEAK-END/ { leak_end(); inleak = 0; next }
inleak && /unreferenced object/ { leak_end(); leak = $0; lctx = 12; next }
inleak && lctx > 0 { leak = leak "\n    " $0; lctx--; next }
/PFM-TAINT / {
	before = field($0, "before") + 0; after = field($0, "after") + 0; tainted = 1
	bad = ""
	for (b = 0; b <= 18; b++) {
		if (int(after / 2^b) % 2 == 1 && int(before / 2^b) % 2 == 0 && !allowed[b])
			bad = bad " " tflag[b + 1] " (bit " b ", " 2^b ")"
	}
	if (bad != "") problem("taint changed " before " -> " after ":" bad)
	next
}
/PFM-HOST-TIMEOUT/ { hosttimeout = $0 }
/PFM-DONE/ { done = 1 }
# ---- TAP of the test whose output is being printed ----
# A console message can land at the end of a TAP line (seen under
# STRESS=1: "ok 12 - ...[   86.49] clocksource: Long readout interval"):
# the result before it still counts (the message is judged on its own).
out != "" && cur != "" && iskernel($0) && $0 ~ /^(not )?ok [0-9]+/ {
	sub(/\[ *[0-9]+\.[0-9]+\].*$/, "")
}
out != "" && cur != "" && !iskernel($0) {
	n = tidx[cur]
	if ($0 ~ /^1\.\.[0-9]+/) { plan[n] = substr($1, 4) + 0; next }
	# A failing case prints its reason as diagnostics just before its
	# `not ok`: keep the last few, so the summary (all CI shows) says why.
	if ($0 ~ /^# /) { why3 = why2; why2 = why1; why1 = $0; next }
	if ($0 ~ /^(not )?ok [0-9]+/) {
		# TAP: a case marked "# TODO" is a known gap: reported, not a failure (counted as skipped).
		if (toupper($0) ~ /# *(SKIP|TODO)/) sk[n]++
		else if ($0 ~ /^ok/) ps[n]++
		else {
			fl[n]++; fails[n] = fails[n] "\n    " $0
			if (why3 != "") fails[n] = fails[n] "\n      " why3
			if (why2 != "") fails[n] = fails[n] "\n      " why2
			if (why1 != "") fails[n] = fails[n] "\n      " why1
		}
		why1 = why2 = why3 = ""
	}
}
END {
	P = hp; F = hf; S = hs
	for (n = 1; n <= ntest; n++) {
		t = tname[n]; p = ps[n] + 0; f = fl[n] + 0; s = sk[n] + 0; why = ""
		# Problems of the binary as a whole add at most one failure.
		if (!ended[n]) why = why "; never finished (guest crashed or hung)"
		if (timedout[t]) why = why "; killed after the per-test timeout (" timedout[t] ")"
		if (ended[n] && p + f + s == 0) {   # no TAP at all: judge by exit status
			if (rc[n] == 0) p = 1; else if (rc[n] == 4) s = 1
			else why = why "; exited rc=" rc[n] " with no TAP result"
		} else if (ended[n]) {
			if (rc[n] != 0 && rc[n] != 4 && fl[n] == 0) why = why "; exited rc=" rc[n] " without a not ok"
			if (plan[n] && p + f + s < plan[n]) why = why "; planned " plan[n] ", reported " p + f + s
		}
		if (why != "") f++
		P += p; F += f; S += s
		if (!quiet) {
			printf "%s %s: %d passed, %d failed, %d skipped%s%s\n", (f ? "FAIL" : "ok  "), t, p, f, s, why, fails[n]
		}
	}
	if (mode == "check" && ntest == 0) problem("no guest test ran")
	if (!booted) problem("the guest never reached /init")
	if (!done) problem("the guest did not finish: no PFM-DONE (crash, panic, hang or timeout)" \
		(hosttimeout != "" ? ": " hosttimeout : ""))
	else if (!tainted) problem("no PFM-TAINT line")
	if (!quiet && tainted) printf "guest taint: %d before the tests, %d after (4096 = O, out-of-tree module: expected)\n", before, after
	if (knownleak && !quiet)
		printf "known kernel leak, not counted: %d kmemleak records of sysfs_slab_add'"'"'s missing kobject_put (mm/slub.c) under pfm_test_failnth'"'"'s fault injection\n", knownleak
	for (i = 1; i <= nprob; i++) print "PROBLEM: " probs[i]
	F += nprob
	if (nprob && !quiet) print "full console log: " logname
	if (!quiet) printf "%d passed, %d failed, %d skipped\n", P, F, S
	exit (F > 0)
}'
