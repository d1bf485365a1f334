#!/bin/sh
# /init of the perfmon test guest (busybox sh, PID 1). Copied into the
# initramfs by scripts/initramfs.sh; never run on the host.
#
# The job comes from the kernel command line:
#   pfm.mode=check    run every executable in /tests, in name order
#   pfm.mode=run      run /bin/pfm-demo.sh
#   pfm.mode=cmd      run the shell command in /pfm-cmd (added by scripts/vm.sh)
#   pfm.mode=shell    interactive shell on the console
#   pfm.timeout=N     per-test (and per-job) timeout in seconds, default 600
#                     (scripts/vm.sh has scaled it by the slowdown already)
#   pfm.slowdown=PCT  how much slower than an idle machine the guest runs,
#                     in percent (scripts/vm.sh measures it on the host);
#                     exported to the tests as PFM_SLOWDOWN, which scales
#                     their watchdogs (tests/guest/src/lib.rs)
#
# Everything the host parses (scripts/check-log.sh, scripts/vm.sh) is a line
# starting with "PFM-". Test and job output is captured to a file and printed
# after the program ends, between PFM-OUT-BEGIN and PFM-OUT-END (tests: as is,
# run/cmd: each line prefixed "PFM| "), so kernel messages printed on the same
# serial console while it runs cannot cut its TAP lines in half. Kernel
# messages keep going to the console live.
#
# No `set -e`: if PID 1 exits the kernel panics; every failure is reported
# as a line and the guest always powers off.

export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TERM=${TERM:-vt100}

mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs /dev/shm 2>/dev/null
hostname pfm-guest
# The debug kernel has memory cgroups: everything from here on runs in a
# child cgroup with the memory controller, so the module's accounted
# allocations are charged and freeing one takes memcg's per-CPU stock lock,
# which lockdep refuses under a raw spinlock every time (kernel/debug.config).
if mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null &&
	echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
	mkdir -p /sys/fs/cgroup/pfm && echo $$ >/sys/fs/cgroup/pfm/cgroup.procs
fi
chown 1000:1000 /home/pfmuser

mode=shell timeout=600 slowdown=100
for arg in $(cat /proc/cmdline); do
	case $arg in
	pfm.mode=*) mode=${arg#pfm.mode=} ;;
	pfm.timeout=*) timeout=${arg#pfm.timeout=} ;;
	pfm.slowdown=*) slowdown=${arg#pfm.slowdown=} ;;
	esac
done
export PFM_SLOWDOWN=$slowdown

KMEMLEAK=/sys/kernel/debug/kmemleak
# kmemleak=off on the command line (the install test's boot): no scans.
grep -qw kmemleak=off /proc/cmdline && KMEMLEAK=/nonexistent
if [ -e $KMEMLEAK ]; then
	# Forget what boot itself left behind, so only leaks made by the job count.
	echo scan >$KMEMLEAK; echo clear >$KMEMLEAK
fi

taint_before=$(cat /proc/sys/kernel/tainted)
echo "PFM-BOOTED mode=$mode cpus=$(grep -c ^processor /proc/cpuinfo) kernel=$(uname -r) taint=$taint_before slowdown=$slowdown% timeout=${timeout}s"

module_loaded() { grep -q '^perfmon ' /proc/modules; }

# Kill whatever a program left running (kill -1 spares PID 1), then unload
# the module if it is still loaded: a module that cannot be removed is a bug.
cleanup_after() {
	kill -9 -1 2>/dev/null
	sleep 1
	if module_loaded; then
		rmmod perfmon 2>&1 || echo "PFM-RMMOD-FAIL after=$1"
	fi
}

# run_one NAME CMD...: runs CMD as root in /tmp with the timeout, output to a file,
# then prints that output framed by markers. Sets $rc.
run_one() {
	name=$1; shift
	out=/tmp/.pfm-out.$$
	start=$(date +%s)
	(cd /tmp && exec timeout -s KILL "$timeout" "$@") </dev/null >"$out" 2>&1
	rc=$?
	if [ $rc = 137 ] && [ $(( $(date +%s) - start )) -ge "$timeout" ]; then
		# What it was waiting for: the case after the last one it
		# reported (TAP), or the job's last line.
		last=$(grep -E '^(ok|not ok) [0-9]+' "$out" | tail -n 1)
		[ -n "$last" ] || last=$(tail -n 1 "$out")
		echo "PFM-TIMEOUT $name after ${timeout}s (slowdown $slowdown%), killed while it ran; its last report: ${last:-nothing}"
	fi
	echo "PFM-OUT-BEGIN $name"
	if [ "$mode" = check ]; then
		cat "$out"
		# A last line without a newline would swallow the marker.
		[ -z "$(tail -c 1 "$out")" ] || echo
	else
		# run/cmd: "PFM| " on every line lets the host show exactly the
		# job's output, even if a kernel message lands in the middle of it.
		awk '{ print "PFM| " $0 }' "$out"
	fi
	echo "PFM-OUT-END $name rc=$rc"
	rm -f "$out"
}

case $mode in
check)
	for t in /tests/*; do
		[ -f "$t" ] && [ -x "$t" ] || continue
		name=${t##*/}
		echo "PFM-TEST-BEGIN $name"
		run_one "$name" "$t"
		cleanup_after "$name"
		echo "PFM-TEST-END $name rc=$rc"
	done
	;;
run)
	if [ -x /bin/pfm-demo.sh ]; then
		run_one demo /bin/pfm-demo.sh
	else
		run_one demo sh -c 'echo "no /bin/pfm-demo.sh in this image"; exit 1'
	fi
	cleanup_after demo
	;;
cmd)
	run_one cmd sh /pfm-cmd
	cleanup_after cmd
	;;
shell)
	echo "perfmon test guest: the module is /lib/perfmon.ko. Leave with 'exit' (or Ctrl-a x)."
	setsid cttyhack sh -l
	cleanup_after shell
	;;
*)
	echo "PFM-ERROR unknown pfm.mode=$mode"
	;;
esac

if [ -e $KMEMLEAK ]; then
	# kmemleak only reports objects that were 5 s old when the scan started,
	# and a pointer in flight can hide or fake a leak for one scan: scan,
	# pause, scan again (a scan takes ~12 s on the debug kernel), then read.
	if echo scan >$KMEMLEAK && sleep 5 && echo scan >$KMEMLEAK; then
		echo "PFM-KMEMLEAK-BEGIN"
		cat $KMEMLEAK
		echo "PFM-KMEMLEAK-END"
	else
		echo "PFM-KMEMLEAK-ERROR the scan failed (kmemleak disabled itself?)"
	fi
fi

if module_loaded; then
	rmmod perfmon 2>&1 || echo "PFM-RMMOD-FAIL at=end"
fi
echo "PFM-TAINT before=$taint_before after=$(cat /proc/sys/kernel/tainted)"
echo "PFM-DONE"
sync
poweroff -f
