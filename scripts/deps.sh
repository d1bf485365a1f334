#!/usr/bin/env bash
# Installs what building and testing perfmon needs, from the package registries
# only: Debian packages, bindgen-cli and Cargo.lock's crates from crates.io.
# Idempotent and quick (offline) when everything is already there.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

debs=(linux-source-6.12 rustc-web rust-web-src libclang-dev clang lld llvm
      clang-22 lld-22 llvm-22 libclang1-22 flex bison bc libelf-dev libssl-dev cpio
      busybox-static qemu-system-x86 libc6-dev make gcc
      libpfm4-dev    # libpfm4-dev: libpfm.a, linked statically into pfm (event names)
      # make deb and the install test (scripts/deb.sh, install-test.sh):
      # debian/'s Build-Depends, lintian, and DKMS with kmod in the test root
      debhelper dh-dkms dpkg-dev fakeroot cargo-web lintian dkms kmod)
# `make check STRESS=1`: the load generator (scripts/stress.sh; without it
# that script falls back to busy shell loops).
[ "${STRESS:-0}" != 1 ] || debs+=(stress-ng)

missing=()
for p in "${debs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# One line per step; apt's and cargo's own output goes to build/logs/deps.log.
apt_install() {
	SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}
if [ ${#missing[@]} -gt 0 ]; then
	echo "packages: installing ${#missing[@]} Debian packages (a few minutes on a fresh machine; log: $(pfm_log_name deps)): ${missing[*]}" >&2
	pfm_quiet deps apt_install "${missing[@]}"
fi

bindgen_missing=0
command -v "$BINDGEN" >/dev/null 2>&1 || bindgen_missing=1
if [ $bindgen_missing = 1 ]; then
	echo "packages: building bindgen-cli from crates.io (about 3 minutes, once; log: $(pfm_log_name deps-bindgen))" >&2
	pfm_quiet deps-bindgen cargo install --locked bindgen-cli
fi
# The crates of Cargo.lock (clap, object, iced-x86, ...): from cargo's own
# cache when it has them all (no network), else from crates.io, once; the
# builds after this one need no network.
crates_missing=0
if [ -f "$PFM_TOP/Cargo.lock" ] &&
	! (cd "$PFM_TOP" && cargo fetch --locked --offline --target x86_64-unknown-linux-gnu) >/dev/null 2>&1; then
	crates_missing=1
	echo "crates: fetching Cargo.lock's crates from crates.io (once; log: $(pfm_log_name deps-crates))" >&2
	(cd "$PFM_TOP" && pfm_quiet deps-crates cargo fetch --locked --target x86_64-unknown-linux-gnu)
fi
[ ${#missing[@]} -gt 0 ] || [ $bindgen_missing = 1 ] || [ $crates_missing = 1 ] || echo "packages: all installed" >&2
