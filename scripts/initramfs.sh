#!/usr/bin/env bash
# Builds the guest image build/initramfs-VARIANT.cpio.gz and prints its path:
#   /bin/busybox + applet symlinks, /init (scripts/guest-init.sh),
#   /lib/perfmon.ko, /bin/pfm, /bin/pfm_bench, /bin/pfm-demo.sh (tests/guest/demo.sh),
#   /tests/*: the workspace's pfm_test_* binaries and EXTRA_TESTS' executables,
#   /etc/passwd with root, pfmuser (1000) and nobody (65534).
#
# usage: initramfs.sh VARIANT
# env:   PFM_KO       the module (default build/module-VARIANT/perfmon.ko; the
#                     image is built without it, with a warning, if it is absent)
#        PFM_GUESTBIN where the static guest programs are
#                     (default target/x86_64-unknown-linux-gnu/release)
#        EXTRA_TESTS  a directory whose executables are added as tests
#        PFM_IMAGE    the image to write (default build/initramfs-VARIANT.cpio.gz)
#        PFM_IMAGE_TESTS=none  no /tests (the cost gate's image,
#                     scripts/cost-gate.sh: a small image boots in seconds)
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:?usage: initramfs.sh VARIANT}
ko=${PFM_KO:-$PFM_BUILD/module-$variant/perfmon.ko}
guestbin=${PFM_GUESTBIN:-$PFM_TOP/target/x86_64-unknown-linux-gnu/release}
extra=${EXTRA_TESTS:-}
out=${PFM_IMAGE:-$PFM_BUILD/initramfs-$variant.cpio.gz}
root=${out%.cpio.gz}.d
tests=${PFM_IMAGE_TESTS:-all}

rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib,etc,root,home/pfmuser,proc,sys,dev,tmp,tests}

# busybox, and its applets as symlinks where `busybox --install -s` would put them.
install -m 755 /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list-full); do
	[ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done

install -m 755 "$PFM_TOP/scripts/guest-init.sh" "$root/init"

if [ -f "$ko" ]; then
	install -m 644 "$ko" "$root/lib/perfmon.ko"
else
	echo "initramfs: warning: no module at $ko, the image has no /lib/perfmon.ko" >&2
fi

ntests=0
if [ -d "$guestbin" ]; then
	for f in "$guestbin"/pfm_test_*; do
		[ "$tests" != none ] || break
		[ -f "$f" ] && [ -x "$f" ] || continue
		install -m 755 "$f" "$root/tests/"; ntests=$((ntests + 1))
	done
	[ ! -x "$guestbin/pfm" ] || install -m 755 "$guestbin/pfm" "$root/bin/pfm"
	# The benchmark (tests/bench, `make bench`): a tool, not a test.
	[ ! -x "$guestbin/pfm_bench" ] || install -m 755 "$guestbin/pfm_bench" "$root/bin/pfm_bench"
fi
# The C tests through the uapi header (built by scripts/guest.sh).
if [ -d "$PFM_BUILD/ctests" ] && [ "$tests" != none ]; then
	for f in "$PFM_BUILD"/ctests/pfm_test_*; do
		[ -f "$f" ] && [ -x "$f" ] || continue
		install -m 755 "$f" "$root/tests/"; ntests=$((ntests + 1))
	done
fi
if [ -n "$extra" ]; then
	[ -d "$extra" ] || { echo "initramfs: EXTRA_TESTS=$extra is not a directory" >&2; exit 1; }
	for f in "$extra"/*; do
		[ -f "$f" ] && [ -x "$f" ] || continue
		[ ! -e "$root/tests/${f##*/}" ] ||
			{ echo "initramfs: EXTRA_TESTS: ${f##*/} clashes with a built-in test" >&2; exit 1; }
		install -m 755 "$f" "$root/tests/"; ntests=$((ntests + 1))
	done
fi
[ ! -f "$PFM_TOP/tests/guest/demo.sh" ] || install -m 755 "$PFM_TOP/tests/guest/demo.sh" "$root/bin/pfm-demo.sh"

cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
pfmuser:x:1000:1000:perfmon test user:/home/pfmuser:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
pfmuser:x:1000:
nogroup:x:65534:
EOF
chmod 1777 "$root/tmp"

# newc with root-owned files; the kernel's built-in initramfs already provides
# /dev/console, so no device node is needed (and no root privilege).
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$out.tmp"
mv "$out.tmp" "$out"
echo "initramfs: $out ($ntests tests, $(du -k "$out" | cut -f1) KiB)" >&2
echo "$out"
