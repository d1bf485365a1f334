#!/bin/sh
# The demo of `make run`, run as /bin/pfm-demo.sh inside the fast test guest
# (scripts/guest-init.sh, pfm.mode=run). Its output is what the user sees:
# the module loading, its PMU and events, and counts of demo workloads from
# `pfm stat`, with perf_event's counts of the same run beside: a command
# that forks, counted whole (its children too, as perf stat does) and
# thread by thread, then its shell alone.
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
forks='for n in 1 2 3; do (i=0; while [ $i -lt 5000 ]; do i=$((i+1)); done; sleep 0.02) & done; wait'
echo "== pfm stat --per-thread --perf -e task-clock,cs -- sh -c '$forks'   (the whole tree: the shell and its 3 children, each counted)"
pfm stat --per-thread --perf -e task-clock,cs -- sh -c "$forks"
echo
echo "== pfm stat --no-inherit --perf -e task-clock,cs -- sh -c '\$forks'   (the shell alone)"
pfm stat --no-inherit --perf -e task-clock,cs -- sh -c "$forks"
echo
echo "== pfm stat -e '{task-clock,cs},migrations,task-clock,cs,migrations' -- sh -c '\$workload'   (6 events on 4 counters: multiplexed, scaled)"
pfm stat -e '{task-clock,cs},migrations,task-clock,cs,migrations' -- sh -c "$workload"
echo
echo "== pfm stat -r 3 -e cs,task-clock -- sleep 0.05   (three runs: the mean, ± its variation)"
pfm stat -r 3 -e cs,task-clock -- sleep 0.05
echo
echo "== pfm stat -p PID --interval 200 --duration 1   (a running process, attached from outside: the shell and the sleeps it forks)"
sh -c 'while :; do sleep 0.01; done' &
spinner=$!
pfm stat -p "$spinner" --interval 200 --duration 1
kill "$spinner"
echo
echo "== rmmod perfmon"
rmmod perfmon
