#!/usr/bin/env bash
# Host half of `make check`: `cargo test` of the workspace (the pure logic:
# PMU register encoding, 64-bit virtualization, the state machine, ...).
# Output goes to the terminal and to build/logs/host-test.log, which ends with
# "PFM-HOST-TEST rc=N" (or "PFM-HOST-TEST none" without a workspace);
# scripts/check-log.sh --host counts it. Always exits 0: the verdict is the summary's.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

log=$PFM_BUILD/logs/host-test.log
mkdir -p "${log%/*}"
if [ ! -f "$PFM_TOP/Cargo.toml" ]; then
	echo "host-test: no Cargo workspace, no host tests" >&2
	echo "PFM-HOST-TEST none" >"$log"
	exit 0
fi
echo "host-test: cargo test --workspace" >&2
set +e
(cd "$PFM_TOP" && cargo test --workspace 2>&1) | tee "$log.tmp" >&2
rc=${PIPESTATUS[0]}
set -e
echo "PFM-HOST-TEST rc=$rc" >>"$log.tmp"
mv "$log.tmp" "$log"
