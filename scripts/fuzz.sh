#!/usr/bin/env bash
# make fuzz: a long pfm_fuzz run in the test guest (issue 8).
#
# usage: fuzz.sh VARIANT DURATION_SECS [SEED]
#
# FUZZ_PARAMS: the module's parameters (default "pmu=soft soft_width=16";
# "pmu=intel_arch_sim" fuzzes the hardware path on the simulated PMU;
# "pmu=soft soft_width=16 soft_counters=2" the soft model with two counters,
# so that event sets multiplex more events than the PMU has).
#
# Builds its own guest image (the standard one plus pfm_fuzz) and keeps its
# logs in build/fuzz/, so it can run beside `make check`. The guest loads
# the module, runs `pfm_fuzz --duration DURATION` (progress every minute on
# the console, in build/fuzz/logs/cmd-latest.log while it runs), checks that
# the module's counters drain and that rmmod succeeds; the console is then
# judged like make check's (kernel splats, kmemleak, taint). Prints the
# fuzzer's summary (operations executed, anomalies) and any splat; exits 1
# on any problem.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:?usage: fuzz.sh VARIANT DURATION [SEED]}
duration=${2:?usage: fuzz.sh VARIANT DURATION [SEED]}
seed=${3:-}
case $duration in ''|*[!0-9]*) echo "fuzz: DURATION must be a number of seconds" >&2; exit 2 ;; esac

out=$PFM_BUILD/fuzz
bin=$PFM_TOP/target/x86_64-unknown-linux-gnu/release/pfm_fuzz
[ -x "$bin" ] || { echo "fuzz: no $bin (make guest)" >&2; exit 1; }
rm -rf "$out/bin"; mkdir -p "$out/bin"
install -m 755 "$bin" "$out/bin/pfm_fuzz"

PFM_KO=${PFM_KO:-$PFM_BUILD/module-$variant/perfmon.ko} PFM_BUILD=$out EXTRA_TESTS=$out/bin \
	"$PFM_TOP/scripts/initramfs.sh" "$variant" >/dev/null

params=${FUZZ_PARAMS:-pmu=soft soft_width=16}
case $params in *[!a-z0-9_=\ ]*) echo "fuzz: FUZZ_PARAMS: name=value words only" >&2; exit 2 ;; esac
cmd="/tests/pfm_fuzz --insmod --module-params \"$params\" --rmmod --kmsg --progress 60 --duration $duration${seed:+ --seed $seed}"
echo "fuzz: $variant kernel, $duration s: $cmd" >&2
set +e
GUEST_TIMEOUT=${GUEST_TIMEOUT:-$(( duration + 900 ))} PFM_BUILD=$out "$PFM_TOP/scripts/vm.sh" "$variant" cmd "$cmd"
rc=$?
set -e
echo "fuzz: console log $out/logs/cmd-latest.log" >&2
if [ $rc = 0 ]; then echo "fuzz: no splat, no leak, no anomaly" >&2; else echo "fuzz: FAILED (status $rc)" >&2; fi
exit $rc
