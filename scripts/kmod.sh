#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds perfmon.ko against a kernel's build tree or installed headers, the
# way DKMS and `make install` do; shipped in the DKMS source as well
# (/usr/src/perfmon-VERSION/scripts/kmod.sh), so it needs bash and the
# kernel's own build tools only, nothing of this repository.
#
#   kmod.sh check KDIR          is KDIR a kernel perfmon builds for? Silent and
#                               status 0 if so; else ONE line on stderr saying
#                               why not, and status 77 (DKMS's "skip")
#   kmod.sh make KDIR SRC ARGS  check, then `make -C KDIR M=SRC ARGS` with the
#                               kernel's own toolchain (below); ARGS default
#                               to `modules`
#   kmod.sh toolchain KDIR      print the make arguments that toolchain takes
#
# Supported: Linux 6.12.y with CONFIG_RUST=y, whose headers carry the Rust
# metadata of its build (rust/libkernel.rmeta, rust/libmacros.so, ...: a
# kernel build tree has them; Ubuntu ships them as linux-lib-rust-KREL).
# perfmon is written against the in-kernel Rust API of 6.12 (the LTS series
# of 2024-2026), which changes with every release, and reaches kernel
# structures through 6.12's bindings: it does not build for another series.
#
# The toolchain is the one that built the kernel, read from its config:
# clang N (CONFIG_CC_IS_CLANG, CONFIG_CLANG_VERSION) gives LLVM=-N when
# clang-N is installed, else LLVM=1 when `clang` is N; a GCC kernel gets the
# CC named by CONFIG_CC_VERSION_TEXT. Rust metadata can only be read by the
# rustc that wrote it: RUSTC is the first of $RUSTC, rustc-X.Y, rustc,
# /usr/bin/rustc whose `--version` is CONFIG_RUSTC_VERSION_TEXT.
set -euo pipefail

PFM_SERIES=6.12
why_series="perfmon is written against 6.12 LTS's in-kernel Rust API, which changes with every release"

usage() { echo "usage: kmod.sh check KDIR | make KDIR SRC [MAKE ARGS] | toolchain KDIR" >&2; exit 2; }
cmd=${1:-}; kdir=${2:-}
[ -n "$cmd" ] && [ -n "$kdir" ] || usage
kdir=${kdir%/}

# The kernel's configuration: include/config/auto.conf is in every headers
# tree (bindeb-pkg's install-extmod-build copies it; .config it does not).
conf=
for c in "$kdir/include/config/auto.conf" "$kdir/.config"; do
	[ -f "$c" ] && { conf=$c; break; }
done
cfg() { sed -n "s/^$1=//p" "$conf" | tr -d '"' | head -n 1; }

krel=
[ ! -f "$kdir/include/config/kernel.release" ] || krel=$(cat "$kdir/include/config/kernel.release")
: "${krel:=${KERNELRELEASE:-unknown}}"

refuse() {
	echo "perfmon: not built for kernel $krel: $*" >&2
	exit 77
}

check() {
	[ -d "$kdir" ] || refuse "no kernel headers at $kdir (install linux-headers-$krel)"
	[ -n "$conf" ] || refuse "$kdir has no include/config/auto.conf (not a configured kernel tree or headers)"
	local v p
	v=$(sed -n 's/^VERSION = //p' "$kdir/Makefile" 2>/dev/null | head -n 1)
	p=$(sed -n 's/^PATCHLEVEL = //p' "$kdir/Makefile" 2>/dev/null | head -n 1)
	[ -n "$v" ] || { v=${krel%%.*}; p=${krel#*.}; p=${p%%.*}; }
	[ "$v.$p" = "$PFM_SERIES" ] ||
		refuse "Linux $v.$p is not supported, only $PFM_SERIES.y ($why_series)"
	[ "$(cfg CONFIG_RUST)" = y ] ||
		refuse "the kernel has no CONFIG_RUST (perfmon is a Rust module; a kernel built with CONFIG_RUST=y is needed: Debian's stock kernels have none, Ubuntu's have it)"
	[ "$(cfg CONFIG_PREEMPT_NOTIFIERS)" = y ] ||
		refuse "the kernel has no CONFIG_PREEMPT_NOTIFIERS (selected by CONFIG_KVM), the hook of perfmon's context switch"
	local f
	for f in rust/libkernel.rmeta rust/libmacros.so rust/libcore.rmeta scripts/target.json; do
		[ -e "$kdir/$f" ] ||
			refuse "its headers have no Rust metadata ($kdir/$f is missing: install the kernel's Rust files, on Ubuntu linux-lib-rust-$krel)"
	done
	toolchain >/dev/null
}

# The make arguments of the kernel's own toolchain; refuses when absent.
toolchain() {
	local args=() text want major r cands=()
	if [ "$(cfg CONFIG_CC_IS_CLANG)" = y ]; then
		major=$(( $(cfg CONFIG_CLANG_VERSION) / 10000 ))
		if command -v "clang-$major" >/dev/null 2>&1; then
			args+=("LLVM=-$major")
		elif clang --version 2>/dev/null | head -n 1 | grep -q "version $major\."; then
			args+=("LLVM=1")
		else
			refuse "it was built with clang $major, which is not installed (install clang-$major, lld-$major and llvm-$major)"
		fi
	else
		# GCC: the first word of CONFIG_CC_VERSION_TEXT is the compiler's name.
		text=$(cfg CONFIG_CC_VERSION_TEXT)
		if command -v "${text%% *}" >/dev/null 2>&1; then
			args+=("CC=${text%% *}")
		fi
	fi
	want=$(cfg CONFIG_RUSTC_VERSION_TEXT)
	[ -n "${RUSTC:-}" ] && cands+=("$RUSTC")
	r=$(echo "$want" | sed -n 's/^rustc \([0-9]*\.[0-9]*\)\..*/\1/p')
	[ -z "$r" ] || cands+=("rustc-$r")
	cands+=(rustc /usr/bin/rustc)
	for r in "${cands[@]}"; do
		if command -v "$r" >/dev/null 2>&1 && [ "$("$r" --version 2>/dev/null)" = "$want" ]; then
			args+=("RUSTC=$(command -v "$r")")
			echo "${args[*]}"
			return 0
		fi
	done
	refuse "it was built with '$want', and no such rustc is installed (tried ${cands[*]}; Rust metadata is only readable by the rustc that wrote it)"
}

case $cmd in
check) check ;;
toolchain) toolchain ;;
make)
	src=${3:?usage: kmod.sh make KDIR SRC [MAKE ARGS]}
	shift 3
	check
	[ $# -gt 0 ] || set -- modules
	read -r -a tc <<<"$(toolchain)"
	echo "kmod: make -C $kdir M=$src ${tc[*]} $*" >&2
	exec make -C "$kdir" M="$src" "${tc[@]}" -j"$(nproc)" "$@"
	;;
*) usage ;;
esac
