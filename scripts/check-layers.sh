#!/usr/bin/env bash
# The module's layering, checked (issue 13): only rust/ calls C, and the
# calls go down: device -> context -> thread side / vectors / PMU layer ->
# rust/. Prints each violation; exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

bad=0
complain() { echo "layers: $*" >&2; bad=1; }

# Kernel-side Rust outside rust/: no C function called (`bindings::f(`);
# constants and types are fine.
mapfile -t kernel_rs < <(ls pfm_*.rs; find pfm_*/ -name '*.rs')
while IFS= read -r hit; do
    complain "C called outside rust/: $hit"
done < <(grep -nE 'bindings::[a-z_][a-z_0-9]*\(' "${kernel_rs[@]}" || true)

# Nothing below the context names it: the thread side, the vectors and the
# PMU layer reach it only through the traits it implements.
mapfile -t below < <(ls pfm_ctxsw.rs pfm_intr.rs pfm_x86.rs; find pfm_ctxsw/ pfm_x86/ -name '*.rs')
while IFS= read -r hit; do
    complain "calls up into the context: $hit"
done < <(grep -nE '(crate::|super::)pfm_ctx(::|\b)|crate::pfm_dev' "${below[@]}" || true)

# The vectors do not name the thread side either (they deliver through
# their OverflowSink trait).
while IFS= read -r hit; do
    complain "the vectors name the thread side: $hit"
done < <(grep -nE 'crate::pfm_ctxsw' pfm_intr.rs || true)

[ "$bad" = 0 ] && echo "layers: only rust/ calls C; calls go down"
exit "$bad"
