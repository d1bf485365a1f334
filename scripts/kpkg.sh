#!/usr/bin/env bash
# Packages a cached test kernel the way a distribution ships one, for the
# install test (scripts/install-test.sh), without building anything again:
#
#   linux-image-KREL     /boot/vmlinuz-KREL, config-KREL, System.map-KREL and
#                        /lib/modules/KREL (its modules, modules.order,
#                        modules.builtin*), with the /etc/kernel/*.d hook
#                        scripts as maintainer scripts: as 6.12's
#                        `make bindeb-pkg` (scripts/package/builddeb)
#   linux-headers-KREL   /usr/src/linux-headers-KREL from 6.12's own
#                        scripts/package/install-extmod-build (what
#                        bindeb-pkg's headers package holds), and the
#                        /lib/modules/KREL/build link
#   linux-lib-rust-KREL  the Rust metadata of the build, rust/*.rmeta and
#                        rust/*.so, into the headers tree (Ubuntu's
#                        linux-lib-rust split); bindeb-pkg has no such package
#
# usage: kpkg.sh VARIANT    prints the directory of the .debs
#        (build/kpkg-VARIANT/; reused while newer than the kernel build)
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:?usage: kpkg.sh VARIANT}
kdir=${KDIR:-$(pfm_kernel_dir "$variant")}
[ -f "$kdir/.pfm-complete" ] || [ -n "${KDIR:-}" ] ||
	{ echo "kpkg: no $variant kernel in $kdir (run: make kernel VARIANT=$variant)" >&2; exit 1; }
src=$PFM_CACHE/src/linux-source-6.12
krel=$(cat "$kdir/include/config/kernel.release")
out=$PFM_BUILD/kpkg-$variant
ver=$krel-1

if [ -f "$out/.complete" ] && [ "$out/.complete" -nt "$kdir/.pfm-complete" ] &&
	[ "$(cat "$out/.complete")" = "$kdir" ]; then
	echo "kpkg: the $variant kernel's packages are in ${out#"$PFM_TOP"/}" >&2
	echo "$out"
	exit 0
fi
echo "kpkg: linux-image, linux-headers and linux-lib-rust-$krel (log: $(pfm_log_name "kpkg-$variant"))" >&2
rm -rf "$out"; mkdir -p "$out"
tmp=$out/tmp

control() {   # control PKGDIR PACKAGE DESCRIPTION [DEPENDS]
	mkdir -p "$1/DEBIAN"
	{
		echo "Package: $2"
		echo "Source: linux-upstream"
		echo "Version: $ver"
		echo "Architecture: amd64"
		echo "Maintainer: perfmon test kernel <perfmon@example.org>"
		echo "Section: kernel"
		echo "Priority: optional"
		[ -z "${4:-}" ] || echo "Depends: $4"
		echo "Description: $3"
		echo " The perfmon test kernel ($variant), packaged for the install test."
	} >"$1/DEBIAN/control"
}
deb() { dpkg-deb --root-owner-group -Zgzip -z1 --build "$1" "$out/" >/dev/null; }

image() {
	local p=$tmp/linux-image-$krel m mod dst
	m=$p/lib/modules/$krel
	mkdir -p "$p/boot" "$m"
	cp "$kdir/arch/x86/boot/bzImage" "$p/boot/vmlinuz-$krel"
	cp "$kdir/.config" "$p/boot/config-$krel"
	cp "$kdir/System.map" "$p/boot/System.map-$krel"
	# What modules_install puts there (scripts/Makefile.modinst), stripped as
	# bindeb-pkg does (INSTALL_MOD_STRIP=1).
	sed 's:^\(.*\)\.o$:kernel/\1.ko:' "$kdir/modules.order" >"$m/modules.order"
	cp "$kdir/modules.builtin" "$kdir/modules.builtin.modinfo" "$m/"
	while read -r mod; do
		dst=$m/kernel/${mod%.o}.ko
		mkdir -p "${dst%/*}"
		llvm-strip$PFM_LLVM --strip-debug -o "$dst" "$kdir/${mod%.o}.ko"
	done <"$kdir/modules.order"
	control "$p" "linux-image-$krel" "Linux kernel, version $krel"
	# builddeb's maintainer scripts: the /etc/kernel/*.d hooks (dkms's among them).
	local script
	for script in postinst postrm preinst prerm; do
		cat >"$p/DEBIAN/$script" <<-EOF
		#!/bin/sh
		set -e
		export DEB_MAINT_PARAMS="\$*"
		export INITRD=Yes
		test -d /etc/kernel/$script.d && run-parts --arg="$krel" --arg="/boot/vmlinuz-$krel" /etc/kernel/$script.d
		exit 0
		EOF
		chmod 755 "$p/DEBIAN/$script"
	done
	deb "$p"
}

headers() {
	local p=$tmp/linux-headers-$krel
	mkdir -p "$p/lib/modules/$krel"
	# As builddeb's install_kernel_headers runs it, from the kernel's objtree.
	(cd "$kdir" && srctree=$src SRCARCH=x86 CC=clang$PFM_LLVM HOSTCC=clang$PFM_LLVM MAKE=make \
		sh "$src/scripts/package/install-extmod-build" "$p/usr/src/linux-headers-$krel")
	ln -s "/usr/src/linux-headers-$krel" "$p/lib/modules/$krel/build"
	control "$p" "linux-headers-$krel" "Linux kernel headers for $krel on amd64"
	deb "$p"
}

librust() {
	local p=$tmp/linux-lib-rust-$krel d
	d=$p/usr/src/linux-headers-$krel/rust
	mkdir -p "$d"
	cp "$kdir"/rust/*.rmeta "$kdir"/rust/*.so "$d/"
	control "$p" "linux-lib-rust-$krel" "Rust metadata of Linux $krel, to build out-of-tree Rust modules" \
		"linux-headers-$krel (= $ver)"
	deb "$p"
}

all() { image; headers; librust; }
pfm_quiet "kpkg-$variant" all
rm -rf "$tmp"
echo "$kdir" >"$out/.complete"
echo "kpkg: $(cd "$out" && ls ./*.deb | sed 's|^\./||' | tr '\n' ' ')" >&2
echo "$out"
