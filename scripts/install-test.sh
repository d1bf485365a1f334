#!/usr/bin/env bash
# The install test of `make check` (issue 37; Documentation/install.rst):
# perfmon installed as a user installs it, on the test kernel packaged as a
# distribution ships one, then the guest booted from the result.
#
#   1. make deb: perfmon-dkms and pfm, lintian without errors (scripts/deb.sh)
#   2. the VARIANT kernel as linux-image, linux-headers (bindeb-pkg's
#      install-extmod-build) and linux-lib-rust (its Rust metadata) packages
#      (scripts/kpkg.sh, from the cached build: nothing is rebuilt)
#   3. a fresh root: an overlay on this machine's / (for its toolchain, dkms
#      and dpkg database), writes kept in build/install-root-VARIANT/upper;
#      in it, dpkg -i of the kernel's packages, then of perfmon-dkms and pfm,
#      whose postinst has DKMS build and install the module for the kernel
#   4. kernels perfmon does not build for, refused by `dkms build` in one
#      line (status 77): no CONFIG_RUST, headers without the Rust metadata,
#      Linux 6.11
#   5. the guest image from that root (its /lib/modules/KREL, kmod, pfm and
#      the libraries they need, /etc/modprobe.d; busybox for the rest),
#      booted on the root's /boot/vmlinuz-KREL: tests/install/pfm_test_install.sh
#      loads the module on the first open, by modprobe, and unloads it
#   6. dpkg --purge of both packages removes the module and its DKMS tree
#
# Host steps' TAP goes to build/logs/install-test.tap, the guest's console to
# build/logs/install-latest.log; scripts/check-log.sh judges both. Needs root
# (mount, chroot). usage: install-test.sh VARIANT
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:?usage: install-test.sh VARIANT}
logs=$PFM_BUILD/logs
tap=$logs/install-test.tap
log=$logs/install-test.log
mkdir -p "$logs"
rm -f "$logs/install-latest.log"
: >"$log"
: >"$tap"
n=0
ok() { n=$((n + 1)); echo "ok $n - $*" >>"$tap"; }
not_ok() {
	n=$((n + 1)); echo "not ok $n - $1" >>"$tap"; shift
	local l; for l in "$@"; do echo "# $l" >>"$tap"; done
	echo "install-test: FAILED: $(tail -n 1 "$tap" | sed 's/^# //')" >&2
}
# Stops the test: the steps that depend on this one cannot run.
bail() { not_ok "$@"; echo "Bail out! $1" >>"$tap"; exit 1; }
start=$SECONDS

# ---- 1, 2: the packages ----
if changes=$("$PFM_TOP/scripts/deb.sh"); then
	ok "make deb in $((SECONDS - start)) s: $(cd "${changes%/*}" && ls ./*.deb | sed 's|^\./||' | tr '\n' ' ')"
	ok "lintian: $(grep -c '^E: ' "$logs/lintian.log" || true) errors, $(grep -c '^W: ' "$logs/lintian.log" || true) warnings ($(grep '^W: ' "$logs/lintian.log" | cut -d' ' -f3 | sort -u | tr '\n' ' '))"
else
	ls "$PFM_BUILD"/deb/*.deb >/dev/null 2>&1 || bail "make deb built the packages" "see $logs/deb.log"
	ok "make deb built the packages"
	not_ok "lintian reports no error" "$(grep '^E: ' "$logs/lintian.log" | head -n 5)"
fi
debs=$PFM_BUILD/deb
kpkg=$("$PFM_TOP/scripts/kpkg.sh" "$variant") || bail "the $variant kernel's packages" "see $logs/kpkg-$variant.log"
kdir=$(cat "$kpkg/.complete")
krel=$(cat "$kdir/include/config/kernel.release")
ok "the $variant kernel $krel packaged: $(cd "$kpkg" && ls ./*.deb | sed 's|^\./||' | tr '\n' ' ')"
version=$(cd "$PFM_TOP" && dpkg-parsechangelog -SVersion)

# ---- 3: the root ----
top=$PFM_BUILD/install-root-$variant
mnt=$top/root
umount_all() {
	local m
	for m in proc sys dev/pts dev ""; do
		mountpoint -q "$mnt/$m" 2>/dev/null && umount -l "$mnt/$m"
	done
	return 0
}
[ ! -d "$mnt" ] || umount_all
# Never delete through a mount that is still there (the root's /dev is the host's).
if awk -v t="$top/" 'index($2 "/", t) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
	bail "a fresh root: $top still has mounts from an earlier run; unmount them first"
fi
rm -rf --one-file-system "$top"
mkdir -p "$top/upper" "$top/work" "$mnt"
trap umount_all EXIT
mount -t overlay overlay -o "lowerdir=/,upperdir=$top/upper,workdir=$top/work" "$mnt" ||
	bail "a fresh root (an overlay on /: needs root and overlayfs)"
mount -t proc proc "$mnt/proc"
mount --bind /sys "$mnt/sys"
mount --bind /dev "$mnt/dev"
mount --bind /dev/pts "$mnt/dev/pts"
in_root() { chroot "$mnt" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
mkdir -p "$mnt/tmp/pfm-debs"
cp "$debs"/*.deb "$kpkg"/*.deb "$mnt/tmp/pfm-debs/"

if in_root dpkg-query -W perfmon-dkms pfm >/dev/null 2>&1 || [ -e "$mnt/lib/modules/$krel" ] ||
	[ -e "$mnt/var/lib/dkms/perfmon" ]; then
	bail "the root starts without perfmon-dkms, pfm, /var/lib/dkms/perfmon and /lib/modules/$krel" \
		"this machine has them: the root is an overlay on /"
fi
ok "the root starts without perfmon-dkms, pfm, /var/lib/dkms/perfmon and /lib/modules/$krel"

echo "install-test: dpkg -i the $krel kernel's packages in a fresh root (log: $(pfm_log_name install-test))" >&2
if PFM_LOG_APPEND=1 pfm_quiet install-test in_root sh -c "dpkg -i /tmp/pfm-debs/linux-*.deb"; then
	ok "dpkg -i linux-image, linux-headers and linux-lib-rust-$krel"
else
	bail "dpkg -i linux-image, linux-headers and linux-lib-rust-$krel"
fi

echo "install-test: dpkg -i perfmon-dkms and pfm: DKMS builds the module for $krel (a minute or two)" >&2
t0=$SECONDS
if PFM_LOG_APPEND=1 pfm_quiet install-test in_root sh -c "dpkg -i /tmp/pfm-debs/perfmon-dkms_*.deb /tmp/pfm-debs/pfm_*.deb"; then
	ok "dpkg -i perfmon-dkms pfm: the postinst's dkms build and install took $((SECONDS - t0)) s"
else
	bail "dpkg -i perfmon-dkms pfm (the postinst runs dkms build and install)" "see $log"
fi
st=$(in_root dkms status -m perfmon -k "$krel" 2>&1 || true)
echo "dkms status: $st" >>"$log"
if echo "$st" | grep -q "^perfmon/$version, $krel, x86_64: installed"; then
	ok "dkms status: $st"
else
	not_ok "dkms status says perfmon/$version installed for $krel" "dkms status: $st"
fi
dep=$(in_root modprobe -S "$krel" --show-depends perfmon 2>&1 || true)
devname=$(grep '^perfmon ' "$mnt/lib/modules/$krel/modules.devname" 2>/dev/null || true)
if [ "$dep" = "insmod /lib/modules/$krel/updates/dkms/perfmon.ko " ] && [ "$devname" = "perfmon perfmon c10:249" ]; then
	ok "depmod ran: modprobe finds /lib/modules/$krel/updates/dkms/perfmon.ko; modules.devname: $devname"
else
	not_ok "depmod ran: modprobe finds updates/dkms/perfmon.ko, modules.devname has perfmon" \
		"modprobe --show-depends: $dep" "modules.devname: $devname"
fi
for f in /etc/modprobe.d/perfmon.conf /lib/udev/rules.d/60-perfmon.rules /usr/bin/pfm /usr/share/man/man1/pfm-stat.1.gz \
	/usr/share/bash-completion/completions/pfm; do
	[ -e "$mnt$f" ] || { not_ok "the packages' files are installed" "$f is missing"; continue 2; }
done
ok "the packages' files are installed (modprobe.d, udev rule, pfm, man pages, completions)"

# ---- 4: refusals: a copy of the headers, one thing changed ----
echo "install-test: dkms build for kernels perfmon does not build for" >&2
refusal() {   # refusal NAME EXPECTED-WORDS SETUP-CMD
	local name=$1 want=$2 k=$krel-$1 h out rc lines
	h=$mnt/usr/src/linux-headers-$k
	in_root cp -as "/usr/src/linux-headers-$krel/." "/usr/src/linux-headers-$k"
	rm -f "$h/include/config/kernel.release" "$h/include/config/auto.conf" "$h/Makefile"
	echo "$k" >"$h/include/config/kernel.release"
	cp "$mnt/usr/src/linux-headers-$krel/include/config/auto.conf" "$h/include/config/auto.conf"
	cp "$mnt/usr/src/linux-headers-$krel/Makefile" "$h/Makefile"
	(cd "$h" && eval "$3")
	mkdir -p "$mnt/lib/modules/$k"
	ln -sfn "/usr/src/linux-headers-$k" "$mnt/lib/modules/$k/build"
	set +e
	out=$(in_root dkms build -m perfmon -v "$version" -k "$k" 2>&1)
	rc=$?
	set -e
	{ echo "== dkms build -k $k: status $rc"; echo "$out"; } >>"$log"
	lines=$(echo "$out" | grep -c '^perfmon: ' || true)
	if [ $rc = 77 ] && [ "$lines" = 1 ] && echo "$out" | grep '^perfmon: ' | grep -q "$want"; then
		ok "$name: dkms build refuses, status 77, in one line: $(echo "$out" | grep '^perfmon: ')"
	else
		not_ok "$name: dkms build refuses in one line mentioning '$want' (status $rc, $lines lines)" "$out"
	fi
}
refusal no-rust "no CONFIG_RUST" "sed -i '/^CONFIG_RUST/d' include/config/auto.conf; rm -rf rust"
refusal no-rust-metadata "no Rust metadata" "rm -rf rust"
refusal linux-6.11 "Linux 6.11 is not supported, only 6.12.y" "sed -i 's/^PATCHLEVEL = 12/PATCHLEVEL = 11/' Makefile"

# ---- 5: the guest image from the root ----
img=$top/image
image() {
	rm -rf "$img"
	mkdir -p "$img"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc/modprobe.d,root,home/pfmuser,proc,sys,dev,tmp,tests}
	install -m 755 "$mnt/bin/busybox" "$img/bin/busybox"
	local a f l
	for a in $("$mnt/bin/busybox" --list-full); do
		[ -e "$img/$a" ] || ln -s /bin/busybox "$img/$a"
	done
	# kmod's own tools, not busybox's: modprobe is what the kernel's autoload runs.
	install -m 755 "$mnt/usr/bin/kmod" "$img/usr/bin/kmod"
	for a in modprobe rmmod insmod lsmod depmod modinfo; do ln -sfn /usr/bin/kmod "$img/sbin/$a"; done
	install -m 755 "$mnt/usr/bin/pfm" "$img/usr/bin/pfm"
	# The shared libraries kmod and pfm need, from the root, where ldd finds them.
	for l in $({ in_root ldd /usr/bin/kmod; in_root ldd /usr/bin/pfm; } | grep -o '/[^ ]*' | sort -u); do
		mkdir -p "$img${l%/*}"
		cp -L "$mnt$l" "$img$l"
	done
	cp -a "$mnt/lib/modules" "$img/lib/"
	rm -f "$img/lib/modules/$krel/build"
	rm -rf "$img/lib/modules/$krel"-*
	cp -a "$mnt/etc/modprobe.d/perfmon.conf" "$img/etc/modprobe.d/"
	install -m 755 "$PFM_TOP/scripts/guest-init.sh" "$img/init"
	install -m 755 "$PFM_TOP/tests/install/pfm_test_install.sh" "$img/tests/pfm_test_install"
	printf 'root:x:0:0:root:/root:/bin/sh\npfmuser:x:1000:1000::/home/pfmuser:/bin/sh\n' >"$img/etc/passwd"
	printf 'root:x:0:\npfmuser:x:1000:\n' >"$img/etc/group"
	chmod 1777 "$img/tmp"
	(cd "$img" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$top/initramfs.cpio.gz"
	cp "$mnt/boot/vmlinuz-$krel" "$top/vmlinuz"
}
if PFM_LOG_APPEND=1 pfm_quiet install-test image; then
	ok "guest image from the root: /lib/modules/$krel, kmod, pfm and their libraries ($(du -k "$top/initramfs.cpio.gz" | cut -f1) KiB)"
else
	bail "guest image from the root"
fi

# ---- 6: removal ----
if PFM_LOG_APPEND=1 pfm_quiet install-test in_root dpkg --purge pfm perfmon-dkms &&
	[ ! -e "$mnt/lib/modules/$krel/updates/dkms/perfmon.ko" ] && [ ! -e "$mnt/var/lib/dkms/perfmon" ] &&
	[ ! -e "$mnt/usr/src/perfmon-$version" ] && [ ! -e "$mnt/etc/modprobe.d/perfmon.conf" ] &&
	! in_root modprobe -S "$krel" --show-depends perfmon >/dev/null 2>&1; then
	ok "dpkg --purge pfm perfmon-dkms: the module, its DKMS tree, source and modprobe.d file are gone; modprobe no longer finds it"
else
	not_ok "dpkg --purge pfm perfmon-dkms removes the module, its DKMS tree, source and modprobe.d file"
fi
umount_all
trap - EXIT
echo "1..$n" >>"$tap"
echo "install-test: host steps done in $((SECONDS - start)) s: $(grep -c '^ok' "$tap") ok, $(grep -c '^not ok' "$tap" || true) not ok" >&2

# ---- the guest ----
# kmemleak=off: the module's leaks are the guest tests' business (their
# boot scans); this boot is about the installation, and saves the scans' 40 s.
PFM_LOG_JOB=install PFM_INITRD=$top/initramfs.cpio.gz PFM_KERNEL=$top/vmlinuz GUEST_TIMEOUT=${INSTALL_GUEST_TIMEOUT:-600} \
	PFM_CMDLINE="kmemleak=off ${PFM_CMDLINE:-}" "$PFM_TOP/scripts/vm.sh" "$variant" check
