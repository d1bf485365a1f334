#!/usr/bin/env bash
# Builds perfmon.ko for one kernel variant (or against KDIR when given) and
# copies it to build/module-VARIANT/perfmon.ko. The sources are copied to a
# scratch directory first so that kbuild's objects never land in the repo.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

variant=${1:?usage: module.sh fast|debug [KDIR]}
kdir=${2:-}
[ -n "$kdir" ] || kdir=$(PFM_KERNEL_QUIET=1 "$PFM_TOP/scripts/kernel.sh" "$variant")

out=$PFM_BUILD/module-$variant
echo "module: perfmon.ko for the $variant kernel (log: $(pfm_log_name "module-$variant"))" >&2
mkdir -p "$out/src"
# Only the module's own files travel; rsync-like copy that keeps mtimes so
# kbuild rebuilds only what changed.
(cd "$PFM_TOP" && cp -a --parents Kbuild pfm_*.rs rust include "$out/src/")
# The top-level files' rooms: pfm_ctx/, pfm_ctxsw/, pfm_x86/, ...
for room in "$PFM_TOP"/pfm_*/; do
    [ ! -d "$room" ] || (cd "$PFM_TOP" && cp -a --parents "$(basename "$room")" "$out/src/")
done
# shellcheck disable=SC2046
pfm_quiet "module-$variant" make -C "$kdir" M="$out/src" $(pfm_kmake_args) modules
cp "$out/src/perfmon.ko" "$out/perfmon.ko"
echo "$out/perfmon.ko"
