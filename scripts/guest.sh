#!/usr/bin/env bash
# Builds the static guest programs of the Cargo workspace: every pfm_test_*
# binary (a guest test) and the pfm CLI, in target/x86_64-unknown-linux-gnu/release/.
# The explicit --target keeps them apart from the host `cargo test` build, and
# RUSTFLAGS then applies to them only.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

[ -f "$PFM_TOP/Cargo.toml" ] || { echo "guest: no Cargo workspace (Cargo.toml) to build the guest programs from" >&2; exit 1; }
cd "$PFM_TOP"
echo "guest programs: pfm and the tests, static (log: $(pfm_log_name guest))" >&2
RUSTFLAGS="-C target-feature=+crt-static" \
	pfm_quiet guest cargo build --release --workspace --target x86_64-unknown-linux-gnu

# The C tests (tests/c/*.c): C tools written against the uapi header alone.
mkdir -p "$PFM_BUILD/ctests"
for src in "$PFM_TOP"/tests/c/*.c; do
	[ -f "$src" ] || continue
	bin=$PFM_BUILD/ctests/$(basename "$src" .c)
	[ "$bin" -nt "$src" ] && [ "$bin" -nt "$PFM_TOP/include/uapi/linux/perfmon.h" ] ||
		PFM_LOG_APPEND=1 pfm_quiet guest \
			${CC:-cc} -O2 -static -Wall -Wextra -Werror -I "$PFM_TOP/include/uapi" -o "$bin" "$src"
done
