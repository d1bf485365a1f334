# Shared settings of the perfmon build and test scripts (sourced, not run).
# Everything here can be overridden from the environment or the make command line.

: "${PFM_CACHE:=/var/cache/perfmon}"             # kernels and sources live here, outside the repo
: "${PFM_KSRC_TARBALL:=/usr/src/linux-source-6.12.tar.xz}"
: "${PFM_LLVM:=-22}"                             # LLVM suffix: Debian's rustc 1.96 is built on LLVM 22
: "${RUSTC:=/usr/bin/rustc}"                     # the kernel's Rust must be Debian's (rustup has no rust-src)
: "${RUSTDOC:=/usr/bin/rustdoc}"
: "${BINDGEN:=bindgen}"
# bindgen must parse the kernel headers with the libclang of the compiler
# (LLVM 22): libclang 14 lays task_struct out differently from clang 22, and
# the module refuses to load with bindings that disagree with C.
if [ -z "${LIBCLANG_PATH:-}" ] && [ "$PFM_LLVM" = -22 ]; then
	LIBCLANG_PATH=/usr/lib/llvm-22/lib
fi
[ -z "${LIBCLANG_PATH:-}" ] || export LIBCLANG_PATH
: "${RUST_LIB_SRC:=/usr/lib/rustlib/src/rust/library}"
: "${PFM_BUILD:=$PFM_TOP/build}"                 # per-checkout outputs: module, images, logs
: "${JOBS:=$(( $(nproc) + 1 ))}"
export PATH="$HOME/.cargo/bin:$PATH"
export RUST_LIB_SRC

# make arguments that every kernel and module build shares.
pfm_kmake_args() {
	echo "LLVM=$PFM_LLVM RUSTC=$RUSTC RUSTDOC=$RUSTDOC BINDGEN=$BINDGEN"
}

# The kernel build directory of a variant (fast|debug): keyed by the kernel
# version, the config fragments and the toolchain, so any change rebuilds and
# nothing else does.
pfm_kernel_dir() {
	local variant=$1 key
	key=$( {
		echo "$PFM_KSRC_TARBALL $(stat -c %s "$PFM_KSRC_TARBALL" 2>/dev/null)"
		cat "$PFM_TOP/kernel/base.config" "$PFM_TOP/kernel/$variant.config"
		echo "$PFM_LLVM"; "$RUSTC" --version 2>/dev/null; "$BINDGEN" --version 2>/dev/null
		[ -z "${LIBCLANG_PATH:-}" ] || echo "libclang=$LIBCLANG_PATH"
	} | sha256sum | cut -c1-16)
	echo "$PFM_CACHE/kernels/$variant-$key"
}

# pfm_quiet NAME CMD...: runs CMD with all its output in
# $PFM_BUILD/logs/NAME.log, so a build prints one line per phase (the
# caller's) instead of thousands; V=1 shows the output as well. On failure
# prints the log's last 30 lines and its path, and returns CMD's status.
# PFM_LOG_APPEND=1 adds to the log instead of starting it afresh.
pfm_quiet() {
	local name=$1 log rc tee_opt=
	shift
	log=$PFM_BUILD/logs/$name.log
	mkdir -p "${log%/*}"
	if [ "${PFM_LOG_APPEND:-0}" = 1 ]; then tee_opt=-a; else : >"$log"; fi
	if [ "${V:-0}" = 1 ]; then
		set +e
		"$@" 2>&1 | tee $tee_opt "$log" >&2
		rc=${PIPESTATUS[0]}
		set -e
		return "$rc"
	fi
	"$@" >>"$log" 2>&1 && return 0
	rc=$?
	echo "$name: FAILED (status $rc); the end of $log:" >&2
	tail -n 30 "$log" | sed 's/^/  | /' >&2
	return "$rc"
}

# The log path pfm_quiet writes for NAME, as users should read it.
pfm_log_name() {
	local p=$PFM_BUILD/logs/$1.log
	echo "${p#"$PFM_TOP"/}"
}

# pfm_slowdown_pct: how much slower than on an idle machine a CPU-bound
# thread runs here now, in percent (at least 100): the wall time of a short
# busy loop over its CPU time, i.e. the inverse of the share of a CPU a
# thread gets against the load already running. A TCG guest's vCPU is such
# a thread, so its speed follows the same share; scripts/vm.sh scales the
# guest's timeouts by it and passes it to the guest (pfm.slowdown=).
# PFM_SLOWDOWN set in the environment is taken as is (100: no scaling).
pfm_slowdown_pct() {
	if [ -n "${PFM_SLOWDOWN:-}" ]; then
		echo "$PFM_SLOWDOWN"
		return
	fi
	local TIMEFORMAT='%R %U %S' t real user sys
	# About half a second of CPU (bash): long enough for the scheduler to share
	# the CPUs among what runs, short beside any guest job.
	t=$( { time (i=0; while [ $i -lt 100000 ]; do i=$((i + 1)); done); } 2>&1 )
	read -r real user sys <<<"$t"
	awk -v r="$real" -v u="$user" -v s="$sys" 'BEGIN {
		c = u + s; p = (c > 0) ? int(100 * r / c + 0.5) : 100
		print (p < 100 ? 100 : p) }'
}
