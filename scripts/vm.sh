#!/usr/bin/env bash
# Boots the test kernel of VARIANT with build/initramfs-VARIANT.cpio.gz under
# QEMU and runs one job in it (see scripts/guest-init.sh):
#
#   vm.sh VARIANT check        every guest test; progress on stderr; judge the
#                              log afterwards with scripts/check-log.sh
#   vm.sh VARIANT run          the demo; prints only its output
#   vm.sh VARIANT cmd 'CMD'    one shell command; prints only its output, exits with its status
#   vm.sh VARIANT shell        interactive busybox shell (leave with `exit` or Ctrl-a x)
#
# The whole console goes to build/logs/JOB-TIMESTAMP.log, with a stable
# symlink build/logs/JOB-latest.log (removed first, so it never names a stale
# log). A guest still running after GUEST_TIMEOUT seconds is killed and
# reported with the last 40 console lines. run and cmd also fail on a kernel
# splat, a leak or a bad taint (check-log.sh --quiet).
#
# env: KDIR           kernel build dir (default: the cached VARIANT kernel)
#      QEMU_ACCEL     -accel value (default tcg; e.g. kvm where KVM boots a stock kernel)
#      QEMU_CPU       -cpu value (default max)
#      QEMU_SMP, QEMU_MEM   (default 2, 2G)
#      QEMU_EXTRA     more qemu arguments
#      GUEST_TIMEOUT  seconds on an idle machine (default: check 2700, run/cmd 300)
#      TEST_TIMEOUT   per-test (per-command) seconds inside the guest on an
#                     idle machine (default: check 600, run/cmd GUEST_TIMEOUT-60)
#      PFM_SLOWDOWN   percent: how much slower than on an idle machine the
#                     guest will run (default: measured now, scripts/env.sh
#                     pfm_slowdown_pct); both timeouts are scaled by it, and
#                     the guest gets it (pfm.slowdown=) to scale the tests'
#                     own watchdogs. 100 turns the scaling off.
#      PFM_CMDLINE    more kernel command line
#      PFM_KERNEL, PFM_INITRD   another kernel image or guest image (the
#                     install test's, scripts/install-test.sh)
#      PFM_LOG_JOB    the logs' name instead of JOB (JOB-latest.log)
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

usage() { echo "usage: vm.sh fast|debug check|run|cmd CMD|shell" >&2; exit 2; }
variant=${1:-}; job=${2:-}
[ -n "$variant" ] && [ -n "$job" ] || usage
case $job in check|run|shell) ;; cmd) [ $# -ge 3 ] || usage ;; *) usage ;; esac

logdir=$PFM_BUILD/logs
mkdir -p "$logdir"
logjob=${PFM_LOG_JOB:-$job}
rm -f "$logdir/$logjob-latest.log"

kdir=${KDIR:-$(pfm_kernel_dir "$variant")}
kernel=${PFM_KERNEL:-$kdir/arch/x86/boot/bzImage}
[ -f "$kernel" ] || { echo "vm: no kernel at $kernel (run: make kernel VARIANT=$variant)" >&2; exit 1; }
initrd=${PFM_INITRD:-$PFM_BUILD/initramfs-$variant.cpio.gz}
[ -f "$initrd" ] || { echo "vm: no $initrd (run: scripts/initramfs.sh $variant)" >&2; exit 1; }

case $job in
check) : "${GUEST_TIMEOUT:=2700}"; : "${TEST_TIMEOUT:=600}" ;;
*)     : "${GUEST_TIMEOUT:=300}";  : "${TEST_TIMEOUT:=$(( GUEST_TIMEOUT > 120 ? GUEST_TIMEOUT - 60 : GUEST_TIMEOUT ))}" ;;
esac
# The timeouts above are an idle machine's; a loaded one (another guest,
# `make check STRESS=1`'s load generator) runs the guest slower by the
# share of a CPU its vCPU threads get, measured here just before the boot.
slowdown=$(pfm_slowdown_pct)
GUEST_TIMEOUT=$(( GUEST_TIMEOUT * slowdown / 100 ))
TEST_TIMEOUT=$(( TEST_TIMEOUT * slowdown / 100 ))

# A cmd job carries its command in a second cpio archive appended to the
# image: the kernel unpacks concatenated archives in order.
if [ "$job" = cmd ]; then
	tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
	printf '%s\n' "$3" >"$tmp/pfm-cmd"
	(cd "$tmp" && echo pfm-cmd | cpio -o -H newc -R 0:0 --quiet | gzip -1) >"$tmp/cmd.cpio.gz"
	cat "$initrd" "$tmp/cmd.cpio.gz" >"$tmp/initrd.cpio.gz"
	initrd=$tmp/initrd.cpio.gz
fi

log=$logdir/$logjob-$(date +%Y%m%d-%H%M%S)-$$.log
ln -sfn "${log##*/}" "$logdir/$logjob-latest.log"

# watchdog_thresh=30: a soft lockup is reported after 60 s instead of 20.
# Under TCG a vCPU whose host thread is not scheduled sees its clock jump on
# resume; a 22 s host stall was reported as a soft lockup in init's page
# fault during the kmemleak scan, after every test had passed and the module
# was unloaded. Real lockups (an interrupt storm, a loop with IRQs off) last
# until the guest timeout and are still caught; hangs meet TEST_TIMEOUT.
#
# no5lvl: -cpu max offers LA57, and with 5-level paging KASAN's idea of which
# addresses have shadow follows X86_FEATURE_LA57. identify_cpu() zeroes the
# boot CPU's capabilities before it reads them again (arch/x86/kernel/cpu/
# common.c); an interrupt in that window took the irq_desc lock at a 5-level
# direct-map address and KASAN reported a wild-memory-access at 0.005 s, in
# swapper, before any module existed. 4-level paging has no such window.
cmdline="console=ttyS0 panic=-1 oops=panic printk.devkmsg=on watchdog_thresh=30 no5lvl pfm.mode=$job pfm.timeout=$TEST_TIMEOUT pfm.slowdown=$slowdown ${PFM_CMDLINE:-}"
# shellcheck disable=SC2206
qemu=(qemu-system-x86_64 -accel "${QEMU_ACCEL:-tcg}" -cpu "${QEMU_CPU:-max}"
      -smp "${QEMU_SMP:-2}" -m "${QEMU_MEM:-2G}" -nographic -no-reboot
      -kernel "$kernel" -initrd "$initrd" -append "$cmdline" ${QEMU_EXTRA:-})

if [ "$job" = shell ]; then
	"${qemu[@]}" | tee "$log"
	exit 0
fi

# What the user sees while the guest runs: for check, one line per test; for
# run/cmd, only the job output (the lines the guest prefixed with "PFM| ").
show() {
	if [ "$job" = check ]; then
		awk '{ sub(/\r$/, "") }
		     /PFM-BOOTED/ { print "guest: booted (" $3 ", " $4 ")" > "/dev/stderr" }
		     /PFM-TEST-BEGIN/ { sub(/.*PFM-TEST-BEGIN /, ""); printf "guest: %s ... ", $0 > "/dev/stderr"; fflush("/dev/stderr"); open = 1 }
		     /PFM-TEST-END/ { print $NF > "/dev/stderr"; open = 0 }
		     END { if (open) print "did not finish" > "/dev/stderr" }'
	else
		awk '{ sub(/\r$/, "") } /PFM\| / { sub(/.*PFM\| /, ""); print; fflush() }'
	fi
}

echo "boot: the $variant kernel under QEMU, job $job (console: ${log#"$PFM_TOP"/}; slowdown ${slowdown}%: guest timeout ${GUEST_TIMEOUT}s, per test ${TEST_TIMEOUT}s)" >&2
start=$SECONDS
set +e
timeout -k 10 "$GUEST_TIMEOUT" "${qemu[@]}" </dev/null 2>&1 | tee "$log" | show
st=("${PIPESTATUS[@]}")
set -e
elapsed=$(( SECONDS - start ))

if [ "${st[0]}" = 124 ] || [ "${st[0]}" = 137 ]; then
	# What the guest was waiting for: the test begun and not ended.
	running=$(tr -d '\r' <"$log" | awk '/PFM-TEST-BEGIN /{ t = $NF } /PFM-TEST-END /{ t = "" }
		/PFM-KMEMLEAK-BEGIN|PFM-TAINT / { t = "(after the tests: the leak scan and unload)" }
		END { print (t == "" ? "(no test running: boot, or between tests)" : t) }')
	[ "$job" = check ] || running="the $job job"
	echo "PFM-HOST-TIMEOUT the guest was killed after ${GUEST_TIMEOUT}s (GUEST_TIMEOUT, slowdown ${slowdown}%) while running $running" >>"$log"
	echo "vm: FAIL: guest still running after ${GUEST_TIMEOUT}s (slowdown ${slowdown}%), killed while running $running. Last 40 console lines:" >&2
	tail -n 41 "$log" | head -n 40 | tr -d '\r' | sed 's/^/  | /' >&2
	exit 1
fi
echo "vm: guest finished in ${elapsed}s (qemu status ${st[0]})" >&2
if [ "${st[0]}" != 0 ]; then
	echo "vm: FAIL: qemu exited with status ${st[0]}. Last 40 console lines:" >&2
	tail -n 40 "$log" | tr -d '\r' | sed 's/^/  | /' >&2
	exit 1
fi
[ "$job" = check ] && exit 0

# run/cmd: the job's own status, and no splat, leak or taint.
rc=$(tr -d '\r' <"$log" | sed -n 's/.*PFM-OUT-END [^ ]* rc=\([0-9]*\).*/\1/p' | tail -n 1)
if ! "$PFM_TOP/scripts/check-log.sh" --quiet "$log" >&2; then
	echo "vm: FAIL: the kernel reported problems (above); full console: $log" >&2
	if ! grep -q PFM-DONE "$log"; then
		echo "vm: last 40 console lines:" >&2
		tail -n 40 "$log" | tr -d '\r' | sed 's/^/  | /' >&2
	fi
	exit 1
fi
[ -n "$rc" ] || { echo "vm: FAIL: no job output in $log" >&2; exit 1; }
exit "$rc"
