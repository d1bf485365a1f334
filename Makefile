# SPDX-License-Identifier: GPL-2.0
# perfmon: build the module, and run it in a test kernel under QEMU.
#
#   make run      build what is needed, boot the fast kernel, show per-thread counts
#   make check    every test: host `cargo test` + guest tests on the debug kernel
#   make check STRESS=1   the same, the guest tests run while a load generator
#                 takes every host CPU (scripts/stress.sh), timeouts scaled
#
# KDIR selects the kernel tree to build the module against (default: the
# project's cached test kernel of VARIANT); LLVM, RUSTC, RUSTDOC and BINDGEN
# are passed to it, so the module also builds against any Rust-enabled 6.12.y
# tree: `make module KDIR=/path/to/linux LLVM=1`.

PFM_TOP   := $(CURDIR)
VARIANT   ?= fast
LLVM      ?= -22
RUSTC     ?= /usr/bin/rustc
RUSTDOC   ?= /usr/bin/rustdoc
BINDGEN   ?= bindgen
BUILD     ?= $(PFM_TOP)/build
export PFM_LLVM := $(LLVM)
export RUSTC RUSTDOC BINDGEN

KMAKE_ARGS = LLVM=$(LLVM) RUSTC=$(RUSTC) RUSTDOC=$(RUSTDOC) BINDGEN=$(BINDGEN)

.PHONY: deps kernel module module-clean

# STRESS=1 also installs the load generator (stress-ng).
export STRESS
deps:
	@scripts/deps.sh

kernel: deps
	@scripts/kernel.sh $(VARIANT) >/dev/null

# The module, built out of tree into $(BUILD)/module-$(VARIANT)/perfmon.ko.
module: deps
	@scripts/module.sh $(VARIANT) $(KDIR) >/dev/null

module-clean:
	rm -rf $(BUILD)/module-*

# ---- guest programs, image and VM (scripts/guest.sh, initramfs.sh, vm.sh) ----
#
#   make check [EXTRA_TESTS=DIR]  VARIANT=debug by default
#   make run                      VARIANT=fast by default
#   make vm CMD="..."             one command in the fast guest; `make vm`: a shell
#
# QEMU_ACCEL (default tcg), QEMU_EXTRA, GUEST_TIMEOUT and TEST_TIMEOUT reach
# scripts/vm.sh through the environment; see its header.

export PFM_BUILD := $(BUILD)
LOGS := $(BUILD)/logs

check: VARIANT = debug
run vm: VARIANT = fast
# The command travels unexpanded by make, so "$$x" and quotes reach the guest intact.
vm: export PFM_VM_CMD = $(value CMD)

.PHONY: check run vm guest host-test initramfs
# One step at a time: a parallel make would start two builds of one kernel.
.NOTPARALLEL:

# Static guest programs: pfm_test_* and pfm (target/x86_64-unknown-linux-gnu/release).
guest: deps
	@scripts/guest.sh

# Host `cargo test`; its counts join check's summary (the log keeps its status).
host-test: deps
	@scripts/host-test.sh

initramfs: module guest
	@EXTRA_TESTS="$(if $(EXTRA_TESTS),$(abspath $(EXTRA_TESTS)))" scripts/initramfs.sh $(VARIANT) >/dev/null

# vm.sh removes check-latest.log before booting, so check-log.sh never judges a stale log.
# The install test (scripts/install-test.sh, Documentation/install.rst): the
# packages built and installed in a fresh root, DKMS building the module for
# the test kernel packaged as a distribution's, and that root's guest booted;
# its host steps' TAP and its guest's console join the summary.
# The cost gate (scripts/cost-gate.sh, Documentation/benchmarks.rst): the
# module's instructions per operation on its hot paths, in a boot of its own
# under -icount, held to tests/bench/cost-baseline.txt (1%); its TAP joins
# the summary too.
#
# STRESS=1: the guest tests run while scripts/stress.sh takes every host CPU
# (stopped as soon as the guest ends, whatever happens); scripts/vm.sh
# measures the slowdown that makes and scales the guest's timeouts by it.
check: deps host-test kernel module guest initramfs
	@scripts/check-layers.sh
	@if [ "$(STRESS)" = 1 ]; then scripts/stress.sh start; trap 'scripts/stress.sh stop' EXIT INT TERM; fi; \
	 scripts/vm.sh $(VARIANT) check; \
	 if [ "$(STRESS)" = 1 ]; then scripts/stress.sh stop; fi; \
	 scripts/install-test.sh $(VARIANT); \
	 scripts/cost-gate.sh $(VARIANT); \
	 scripts/check-log.sh --host $(LOGS)/host-test.log --tap $(LOGS)/install-test.tap \
		--tap $(LOGS)/cost-gate.tap $(LOGS)/check-latest.log $(LOGS)/install-latest.log

run: deps kernel module guest initramfs
	@scripts/vm.sh $(VARIANT) run

vm: deps kernel module guest initramfs
	@if [ -n "$$PFM_VM_CMD" ]; then scripts/vm.sh $(VARIANT) cmd "$$PFM_VM_CMD"; \
	 else scripts/vm.sh $(VARIANT) shell; fi

# ---- make man: pfm's man pages (build/pfm.1, pfm-stat.1, ...) and shell ----
# completions (build/completions/), generated from its clap declarations
# (scripts/man.sh). `man ./build/pfm.1` reads it. V=1 shows any build's output.
.PHONY: man
man:
	@scripts/man.sh

# ---- benchmarks: perfmon against perf_event (scripts/bench.sh, tests/bench) ----
#
#   make bench    boots the fast kernel under QEMU -icount shift=1,sleep=off,
#                 runs pfm_bench, prints its tables, saves build/bench/bench-*.json
#
# BENCH_ICOUNT=0 for plain TCG (or another -icount setting), BENCH_ARGS for
# pfm_bench (e.g. "--quick", "--rounds 3 --only ctxsw,read").
# Documentation/benchmarks.rst says what the figures mean.

.PHONY: bench
bench: VARIANT = fast
bench: deps kernel module guest initramfs
	@scripts/bench.sh $(VARIANT)

# Per-function instruction profile of the switch, read and attach paths (a QEMU
# TCG plugin; tests/bench/qemu-prof/profile.sh; PROFILE_ITEMS, PROFILE_ARGS).
.PHONY: bench-profile
bench-profile: VARIANT = fast
bench-profile: deps kernel module guest initramfs
	@tests/bench/qemu-prof/profile.sh

# The cost gate alone (make check runs it too): the debug kernel's module
# instructions per switch, read, attach cycle and fork against
# tests/bench/cost-baseline.txt (scripts/cost-gate.sh); COST_GATE_UPDATE=1
# writes the baseline instead, for a change that must cost more.
.PHONY: cost-gate
cost-gate: VARIANT = debug
cost-gate: export COST_GATE_UPDATE := $(COST_GATE_UPDATE)
cost-gate: deps kernel module guest
	@scripts/cost-gate.sh $(VARIANT)

# ---- make fuzz DURATION=SECS [SEED=N] [FUZZ_PARAMS="..."]: a long pfm_fuzz run ----
#
# (scripts/fuzz.sh.) The debug kernel by default (VARIANT=fast for more
# operations per second); DURATION defaults to 1800; FUZZ_PARAMS are the
# module's parameters (default "pmu=soft soft_width=16"; "pmu=intel_arch_sim"
# for the hardware path; "pmu=soft soft_width=16 soft_counters=2" for event
# sets multiplexing more events than counters). Prints the operations
# executed, the anomalies and any kernel splat; own image and logs in build/fuzz/.
DURATION ?= 1800
.PHONY: fuzz
fuzz: VARIANT = debug
fuzz: export FUZZ_PARAMS := $(FUZZ_PARAMS)
fuzz: deps kernel module guest
	@scripts/fuzz.sh $(VARIANT) $(DURATION) $(SEED)

# ---- make hw-check: the hardware path on a machine with a real PMU ----
#
# (scripts/hw-check.sh; README "On a machine with a PMU".) HW_CHECK=host
# (default: this machine, the module built against KDIR, default the
# running kernel's headers; as root) or HW_CHECK=vm (the test guest under
# KVM with the host CPU's virtual PMU). Where perf_events has no hardware
# PMU it prints one line and the script exits 4 (make then reports
# "Error 4" and, as GNU make always does for a failed recipe, exits 2).
# `make check` runs the same checks on pmu=intel_arch_sim (pfm_test_hwcheck).
.PHONY: hw-check
hw-check:
	@scripts/hw-check.sh

# ---- installing on a machine: make install, make deb (Documentation/install.rst) ----
#
#   make install [KDIR=...] [KERNELRELEASE=...] [INSTALL_MOD_PATH=...]
#       builds perfmon.ko against KDIR (default /lib/modules/KERNELRELEASE/build,
#       KERNELRELEASE defaulting to KDIR's own release, else `uname -r`) with
#       that kernel's toolchain (scripts/kmod.sh), installs it as
#       INSTALL_MOD_PATH/lib/modules/KERNELRELEASE/extra/perfmon.ko and runs
#       depmod; a kernel perfmon does not build for is refused in one line.
#   make uninstall      the same variables: removes it, runs depmod
#   make deb            the Debian packages perfmon-dkms and pfm in build/deb/,
#                       checked by lintian (scripts/deb.sh)
.PHONY: install uninstall deb
install uninstall: export KDIR := $(KDIR)
install uninstall: export KERNELRELEASE := $(KERNELRELEASE)
install uninstall: export INSTALL_MOD_PATH := $(INSTALL_MOD_PATH)
install:
	@scripts/install.sh install
uninstall:
	@scripts/install.sh uninstall

deb:
	@scripts/deb.sh >/dev/null
