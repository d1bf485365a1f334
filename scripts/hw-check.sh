#!/usr/bin/env bash
# make hw-check: the hardware path on a machine with a real PMU (issue 19).
#
#   make hw-check                     on this machine: builds the module
#                                     against the running kernel (KDIR,
#                                     default /lib/modules/$(uname -r)/build),
#                                     insmods it and runs the checks; as root
#   make hw-check HW_CHECK=vm         in the test guest under KVM with the
#                                     host CPU's virtual PMU (QEMU_ACCEL=kvm
#                                     QEMU_CPU=host; VARIANT=fast by default)
#
# The checks are tests/guest/src/bin/pfm_test_hwcheck (perf_events as the
# oracle; `make check` runs the same program on pmu=intel_arch_sim). Where
# perf_events has no hardware PMU it prints one line and exits 4, before
# building anything. The log is build/logs/hw-check.log: send it back with
# `pfm info` and the CPU model (README, "On a machine with a PMU").
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

mode=${HW_CHECK:-host}
log=$PFM_BUILD/logs/hw-check.log
mkdir -p "$PFM_BUILD/logs"

case $mode in
host)
	# perf's core PMU (cpu, or cpu_core/cpu_atom on hybrid Intel).
	have=
	for d in /sys/bus/event_source/devices/cpu /sys/bus/event_source/devices/cpu_core \
		/sys/bus/event_source/devices/cpu_atom; do
		[ ! -d "$d" ] || have=$d
	done
	if [ -z "$have" ]; then
		echo "hw-check: no hardware PMU on this machine (perf_events registers no cpu PMU): nothing to check"
		exit 4
	fi
	[ "$(id -u)" = 0 ] || { echo "hw-check: run as root (insmod, nmi_watchdog)" >&2; exit 2; }
	kdir=${KDIR:-/lib/modules/$(uname -r)/build}
	[ -d "$kdir" ] || { echo "hw-check: no kernel headers at $kdir (install them, or set KDIR)" >&2; exit 2; }
	ko=$("$PFM_TOP/scripts/module.sh" host "$kdir")
	"$PFM_TOP/scripts/guest.sh"
	bin=$PFM_TOP/target/x86_64-unknown-linux-gnu/release
	{
		echo "# hw-check on $(uname -r), $(grep -m1 'model name' /proc/cpuinfo)"
		PFM_MODULE=$ko PFM_FUZZ=$bin/pfm_fuzz "$bin/pfm_test_hwcheck" --real
	} 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	;;
vm)
	extra=$PFM_BUILD/hw-check/extra
	mkdir -p "$extra"
	make -C "$PFM_TOP" guest
	install -m 755 "$PFM_TOP/target/x86_64-unknown-linux-gnu/release/pfm_fuzz" "$extra/pfm_fuzz"
	# Installed beside the tests (/tests/pfm_fuzz), where the checks look.
	set +e
	QEMU_ACCEL=${QEMU_ACCEL:-kvm} QEMU_CPU=${QEMU_CPU:-host} \
		make -C "$PFM_TOP" vm VARIANT="${VARIANT:-fast}" EXTRA_TESTS="$extra" \
		CMD='pfm info; /tests/pfm_test_hwcheck --real' 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	;;
*)
	echo "hw-check: HW_CHECK=host or vm" >&2
	exit 2
	;;
esac
echo "hw-check: log in $log"
exit "$rc"
