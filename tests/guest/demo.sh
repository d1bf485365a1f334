#!/bin/sh
# The demo of `make run`, run as /bin/pfm-demo.sh inside the fast test guest
# (scripts/guest-init.sh, pfm.mode=run). Its output is what the user sees.
# Placeholder until the module and the pfm CLI grow: load the module, show the
# device, and count a small workload per thread.
set -e
echo "== insmod /lib/perfmon.ko"
insmod /lib/perfmon.ko
echo "== /dev/perfmon"
ls -l /dev/perfmon
echo "== kernel log"
dmesg | grep -i perfmon || true
if [ -x /bin/pfm ]; then
	echo "== pfm stat -- sh -c 'i=0; while [ \$i -lt 20000 ]; do i=\$((i+1)); done; sleep 0.2'"
	pfm stat -- sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.2'
else
	echo "(no /bin/pfm in this image yet)"
fi
echo "== rmmod perfmon"
rmmod perfmon
