#!/bin/sh
# The demo of `make run`, run as /bin/pfm-demo.sh inside the fast test guest
# (scripts/guest-init.sh, pfm.mode=run). Its output is what the user sees:
# the module loading, its PMU and events, and per-thread counts of a demo
# workload from `pfm stat`, with perf_event's counts of the same run beside.
set -e
echo "== insmod /lib/perfmon.ko"
insmod /lib/perfmon.ko
dmesg | grep 'perfmon:' | tail -1
echo
echo "== pfm info"
pfm info
echo
echo "== pfm list"
pfm list
echo
workload='i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; for n in 1 2 3 4 5; do sleep 0.02; done'
echo "== pfm stat --perf -- sh -c '$workload'"
pfm stat --perf -- sh -c "$workload"
echo
echo "== pfm stat -e '{task-clock,cs},migrations,task-clock,cs,migrations' -- sh -c '\$workload'   (6 events on 4 counters: multiplexed, scaled)"
pfm stat -e '{task-clock,cs},migrations,task-clock,cs,migrations' -- sh -c "$workload"
echo
echo "== pfm stat -r 3 -e cs,task-clock -- sleep 0.05   (three runs: the mean, ± its variation)"
pfm stat -r 3 -e cs,task-clock -- sleep 0.05
echo
echo "== pfm stat -t TID --interval 200 --duration 1   (a running thread, attached from outside)"
sh -c 'while :; do sleep 0.01; done' &
spinner=$!
pfm stat -t "$spinner" --interval 200 --duration 1
kill "$spinner"
echo
echo "== rmmod perfmon"
rmmod perfmon
