#!/usr/bin/env bash
# Writes pfm's man pages and shell completions from the tool's own clap
# declarations (user/pfm/src/cli.rs, through user/pfm/src/bin/pfm-gen.rs):
#   build/pfm.1, build/pfm-stat.1, build/pfm-record.1, build/pfm-report.1,
#   build/pfm-list.1, build/pfm-info.1
#   build/completions/pfm.bash (bash), _pfm (zsh), pfm.fish (fish)
# Read with `man ./build/pfm.1`; install by copying them where man and the
# shells look (e.g. /usr/local/share/man/man1, /etc/bash_completion.d).
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

cd "$PFM_TOP"
echo "man: pfm's man pages and completions into ${PFM_BUILD#"$PFM_TOP"/}/ (log: $(pfm_log_name man))" >&2
pfm_quiet man cargo build --release -p pfm --bin pfm-gen
PFM_LOG_APPEND=1 pfm_quiet man "$PFM_TOP/target/release/pfm-gen" "$PFM_BUILD"
