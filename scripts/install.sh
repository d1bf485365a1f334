#!/usr/bin/env bash
# make install / make uninstall: perfmon.ko into (or out of)
# INSTALL_MOD_PATH/lib/modules/KERNELRELEASE/extra/, then depmod.
#
# env: KDIR              kernel build tree or headers (default
#                        /lib/modules/KERNELRELEASE/build)
#      KERNELRELEASE     default: KDIR's include/config/kernel.release, else `uname -r`
#      INSTALL_MOD_PATH  root to install into (default /)
# The build goes through scripts/kmod.sh (the kernel's own toolchain; one
# line and status 77 for a kernel perfmon does not build for), in
# build/module-install-KERNELRELEASE/.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

action=${1:?usage: install.sh install|uninstall}
krel=${KERNELRELEASE:-}
kdir=${KDIR:-}
if [ -z "$krel" ]; then
	if [ -n "$kdir" ] && [ -f "$kdir/include/config/kernel.release" ]; then
		krel=$(cat "$kdir/include/config/kernel.release")
	else
		krel=$(uname -r)
	fi
fi
: "${kdir:=/lib/modules/$krel/build}"
root=${INSTALL_MOD_PATH:-}
dest=$root/lib/modules/$krel/extra
# depmod wants the kernel's System.map where it can find one (symbol checks).
depmod_args=(-a)
[ -z "$root" ] || depmod_args+=(-b "$root")
for m in "$kdir/System.map" "$root/boot/System.map-$krel"; do
	[ -f "$m" ] && { depmod_args+=(-F "$m"); break; }
done

case $action in
install)
	out=$PFM_BUILD/module-install-$krel
	echo "install: perfmon.ko for $krel, against $kdir (log: $(pfm_log_name "install-$krel"))" >&2
	"$PFM_TOP/scripts/kmod.sh" check "$kdir"
	rm -rf "$out"; mkdir -p "$out/src"
	(cd "$PFM_TOP" && cp -a --parents Kbuild pfm_*.rs rust include "$out/src/")
	for room in "$PFM_TOP"/pfm_*/; do
		(cd "$PFM_TOP" && cp -a --parents "$(basename "$room")" "$out/src/")
	done
	pfm_quiet "install-$krel" "$PFM_TOP/scripts/kmod.sh" make "$kdir" "$out/src" modules
	# kbuild's modules_install: signs (CONFIG_MODULE_SIG_ALL) and compresses
	# (CONFIG_MODULE_COMPRESS_ALL) as the kernel's own modules are.
	PFM_LOG_APPEND=1 pfm_quiet "install-$krel" "$PFM_TOP/scripts/kmod.sh" make "$kdir" "$out/src" \
		modules_install INSTALL_MOD_PATH="$root" INSTALL_MOD_DIR=extra KERNELRELEASE="$krel"
	depmod "${depmod_args[@]}" "$krel"
	echo "install: $(ls "$dest"/perfmon.ko*); depmod done (modprobe perfmon, or open /dev/perfmon)" >&2
	;;
uninstall)
	rm -f "$dest"/perfmon.ko*
	rmdir "$dest" 2>/dev/null || true
	if [ -d "$root/lib/modules/$krel" ]; then depmod "${depmod_args[@]}" "$krel"; fi
	echo "uninstall: removed $dest/perfmon.ko; depmod done" >&2
	;;
*) echo "usage: install.sh install|uninstall" >&2; exit 2 ;;
esac
