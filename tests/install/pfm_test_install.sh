#!/bin/sh
# pfm_test_install: the guest half of the install test (scripts/install-test.sh).
# The guest boots from what the packages installed in a root: the test
# kernel's /lib/modules/KREL with perfmon.ko where DKMS put it
# (updates/dkms/), modules.dep and modules.alias from depmod, kmod's own
# modprobe, /etc/modprobe.d/perfmon.conf and the pfm package's /usr/bin/pfm.
# No insmod of a build path: the module comes through modprobe, and first
# through the kernel's autoload on the first open of /dev/perfmon.
# modprobe is named by its path: busybox's sh runs its own applets first.
# TAP on stdout.
krel=$(uname -r)
modprobe=/sbin/modprobe
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() {   # check DESCRIPTION CMD...: ok if CMD succeeds, its output as diagnostics
	desc=$1; shift
	if out=$("$@" 2>&1); then ok "$desc"; else not_ok "$desc"; fi
	[ -z "$out" ] || echo "$out" | sed 's/^/# /'
}
loaded() { grep -q '^perfmon ' /proc/modules; }

echo "1..9"

check "/sbin/modprobe, which the kernel's autoload runs, is kmod's ($($modprobe --version 2>&1 | head -n 1))" \
	sh -c '/sbin/modprobe --version | grep -q "^kmod version"'

dep=$($modprobe --show-depends perfmon 2>&1)
echo "# modprobe --show-depends perfmon: $dep"
if [ "$dep" = "insmod /lib/modules/$krel/updates/dkms/perfmon.ko " ] ||
	[ "$dep" = "insmod /lib/modules/$krel/updates/dkms/perfmon.ko" ]; then
	ok "modules.dep resolves perfmon to DKMS's updates/dkms/perfmon.ko (and no other copy is in the image: $(ls /lib/*.ko 2>/dev/null | wc -l) in /lib)"
else
	not_ok "modules.dep resolves perfmon to DKMS's updates/dkms/perfmon.ko"
fi

# What systemd-tmpfiles does at boot with kmod static-nodes' list, and the
# mode the package's udev rule gives that node (static_node=perfmon).
kmod static-nodes --format=tmpfiles --output=/tmp/static-nodes.conf 2>&1
nodes=$(cat /tmp/static-nodes.conf)
echo "$nodes" | sed 's/^/# static-nodes: /'
line=$(echo "$nodes" | grep ' /dev/perfmon ')
if [ -n "$line" ]; then
	mm=${line##* }
	rm -f /dev/perfmon
	mknod -m 0666 /dev/perfmon c "${mm%%:*}" "${mm##*:}"
	ok "kmod static-nodes lists /dev/perfmon ($mm) from modules.devname: node made before any load"
else
	not_ok "kmod static-nodes lists /dev/perfmon from modules.devname"
fi

# The module's parameters through /etc/modprobe.d/perfmon.conf (the
# package's file, with a line added): no PMU under TCG, so the soft model.
echo "options perfmon pmu=soft soft_counters=2" >>/etc/modprobe.d/perfmon.conf
loaded && not_ok "perfmon is not loaded before the first open" || ok "perfmon is not loaded before the first open"

out=$(pfm stat -e task-clock,cs -- sh -c 'sleep 0.1; sleep 0.1' 2>&1); rc=$?
echo "$out" | sed 's/^/# pfm stat: /'
if [ $rc = 0 ] && loaded && echo "$out" | grep -q 'task-clock' && echo "$out" | grep -q 'context-switches'; then
	ok "pfm stat's first open of /dev/perfmon loaded the module (char-major-10-249 autoload) and counted"
else
	not_ok "pfm stat's first open of /dev/perfmon loaded the module and counted (rc=$rc)"
fi

sc=$(cat /sys/module/perfmon/parameters/soft_counters 2>&1)
pmu=$(cat /sys/kernel/perfmon/pmu_model 2>&1)
if [ "$sc" = 2 ] && [ "$pmu" = soft ]; then
	ok "/etc/modprobe.d/perfmon.conf applied at the autoload: pmu_model $pmu, soft_counters $sc"
else
	not_ok "/etc/modprobe.d/perfmon.conf applied at the autoload: pmu_model '$pmu', soft_counters '$sc'"
fi

check "modprobe -r perfmon unloads it" sh -c '/sbin/modprobe -r perfmon && ! grep -q "^perfmon " /proc/modules && [ ! -e /sys/module/perfmon ]'

check "modprobe perfmon loads it again; /dev/perfmon is crw-rw-rw- 10,249" sh -c '
	/sbin/modprobe perfmon && grep -q "^perfmon " /proc/modules &&
	ls -l /dev/perfmon && ls -l /dev/perfmon | grep -q "^crw-rw-rw- .* 10, *249 "'

check "pfm stat counts through the modprobe'd module; modprobe -r cleans up" sh -c '
	pfm stat -e cs -- sleep 0.1 && /sbin/modprobe -r perfmon &&
	! grep -q "^perfmon " /proc/modules && [ ! -e /sys/module/perfmon ] && [ ! -e /sys/kernel/perfmon ]'

[ $failed = 0 ]
