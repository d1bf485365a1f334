#!/usr/bin/env bash
# The load generator of `make check STRESS=1`: takes every CPU of the host
# while the guest tests run, so that they meet a busy machine (another
# guest, a shared CI runner) on purpose rather than by chance.
#
#   stress.sh start   one CPU hog per CPU (stress-ng --cpu N if installed,
#                     which `make deps STRESS=1` installs; else a busy shell
#                     loop per CPU), in a session of its own, niced to 0
#   stress.sh stop    ends that session (only it: its process group)
#
# The pid of the session is in $PFM_BUILD/stress.pid. The guest's timeouts
# grow with it: scripts/vm.sh measures the slowdown after the start.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

pidfile=$PFM_BUILD/stress.pid
mkdir -p "$PFM_BUILD"

stop() {
	[ -f "$pidfile" ] || return 0
	local pid
	pid=$(cat "$pidfile")
	rm -f "$pidfile"
	# The session's group: stress-ng and its workers, or the loops.
	kill -TERM -- "-$pid" 2>/dev/null || true
	sleep 1
	kill -KILL -- "-$pid" 2>/dev/null || true
}

case ${1:-} in
start)
	stop
	n=$(nproc)
	if command -v stress-ng >/dev/null 2>&1; then
		what="stress-ng --cpu $n"
		setsid stress-ng --cpu "$n" --quiet >/dev/null 2>&1 </dev/null &
	else
		what="$n busy shell loops (no stress-ng)"
		# shellcheck disable=SC2016
		setsid bash -c 'for _ in $(seq "$1"); do (while :; do :; done) & done; wait' _ "$n" \
			>/dev/null 2>&1 </dev/null &
	fi
	echo $! >"$pidfile"
	echo "stress: $what on the host's $n CPUs (pid $(cat "$pidfile"), stopped after the guest)" >&2
	;;
stop)
	stop
	;;
*)
	echo "usage: stress.sh start|stop" >&2
	exit 2
	;;
esac
