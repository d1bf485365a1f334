#!/usr/bin/env bash
# Builds (or finds in the cache) the test kernel of one variant: fast or debug.
# Prints the kernel build directory on stdout; progress goes to stderr.
#
# The build directory is keyed by kernel version + config fragments + toolchain
# (see pfm_kernel_dir), lives outside the repo, and is only used once a build
# in it has completed, so an interrupted build is simply redone.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:?usage: kernel.sh fast|debug}
[ -f "$PFM_TOP/kernel/$variant.config" ] || { echo "kernel.sh: no variant '$variant'" >&2; exit 2; }
kdir=$(pfm_kernel_dir "$variant")

# PFM_KERNEL_QUIET=1 (module.sh): a cached kernel goes without saying, so
# `make run` names the kernel phase once.
if [ -f "$kdir/.pfm-complete" ]; then
	[ "${PFM_KERNEL_QUIET:-0}" = 1 ] || echo "kernel: the $variant kernel is cached in $kdir" >&2
	echo "$kdir"
	exit 0
fi

# One build per directory at a time: a second caller waits for the first
# and then finds the kernel complete.
mkdir -p "$PFM_CACHE/kernels"
exec 9>"$kdir.lock"
if ! flock -n 9; then
	echo "kernel: waiting for another build of $kdir" >&2
	flock 9
fi
if [ -f "$kdir/.pfm-complete" ]; then
	echo "$kdir"
	exit 0
fi

src=$PFM_CACHE/src/linux-source-6.12
if [ ! -f "$src/.pfm-unpacked" ]; then
	echo "kernel: unpacking $PFM_KSRC_TARBALL" >&2
	rm -rf "$src"; mkdir -p "$PFM_CACHE/src"
	tar -C "$PFM_CACHE/src" -xf "$PFM_KSRC_TARBALL"
	touch "$src/.pfm-unpacked"
fi

# Measured on 2 cores (README): the time to expect, scaled to this machine.
case $variant in debug) mins=10 ;; *) mins=7 ;; esac
mins=$(( (mins * 2 + $(nproc) - 1) / $(nproc) ))
log=kernel-$variant
echo "kernel: building the $variant kernel, once (about $mins minutes here; log: $(pfm_log_name "$log"))" >&2
start=$SECONDS
rm -rf "$kdir"; mkdir -p "$kdir"
# shellcheck disable=SC2046
kmake() { make -C "$src" O="$kdir" $(pfm_kmake_args) "$@"; }
configure() {
	kmake tinyconfig
	"$src/scripts/kconfig/merge_config.sh" -m -O "$kdir" "$kdir/.config" \
		"$PFM_TOP/kernel/base.config" "$PFM_TOP/kernel/$variant.config"
	kmake olddefconfig
}
pfm_quiet "$log" configure

# A fragment option that Kconfig silently dropped (a missing dependency or
# toolchain) would give a kernel that cannot run the tests: refuse it.
bad=0
for opt in $(grep -h '^CONFIG_.*=[ym]' "$PFM_TOP/kernel/base.config" "$PFM_TOP/kernel/$variant.config"); do
	grep -qx "$opt" "$kdir/.config" || { echo "kernel: $opt did not stick" >&2; bad=1; }
done
grep -qx CONFIG_PREEMPT_NOTIFIERS=y "$kdir/.config" || { echo "kernel: PREEMPT_NOTIFIERS is off" >&2; bad=1; }
[ $bad = 0 ] || { kmake rustavailable >&2 || true; exit 1; }

# all: bzImage, plus Module.symvers for modpost. The log keeps growing.
PFM_LOG_APPEND=1 pfm_quiet "$log" kmake -j"$JOBS" all
touch "$kdir/.pfm-complete"
echo "kernel: the $variant kernel built in $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s" >&2
echo "$kdir"
