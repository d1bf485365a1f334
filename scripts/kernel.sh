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

if [ -f "$kdir/.pfm-complete" ]; then
	echo "kernel: $variant kernel cached in $kdir" >&2
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

echo "kernel: building the $variant kernel in $kdir (several minutes, once)" >&2
rm -rf "$kdir"; mkdir -p "$kdir"
# shellcheck disable=SC2046
kmake() { make -C "$src" O="$kdir" $(pfm_kmake_args) "$@"; }
kmake tinyconfig >&2
"$src/scripts/kconfig/merge_config.sh" -m -O "$kdir" "$kdir/.config" \
	"$PFM_TOP/kernel/base.config" "$PFM_TOP/kernel/$variant.config" >&2
kmake olddefconfig >&2

# A fragment option that Kconfig silently dropped (a missing dependency or
# toolchain) would give a kernel that cannot run the tests: refuse it.
bad=0
for opt in $(grep -h '^CONFIG_.*=[ym]' "$PFM_TOP/kernel/base.config" "$PFM_TOP/kernel/$variant.config"); do
	grep -qx "$opt" "$kdir/.config" || { echo "kernel: $opt did not stick" >&2; bad=1; }
done
grep -qx CONFIG_PREEMPT_NOTIFIERS=y "$kdir/.config" || { echo "kernel: PREEMPT_NOTIFIERS is off" >&2; bad=1; }
[ $bad = 0 ] || { kmake rustavailable >&2 || true; exit 1; }

kmake -j"$JOBS" all >&2    # all: bzImage, plus Module.symvers for modpost
touch "$kdir/.pfm-complete"
echo "$kdir"
