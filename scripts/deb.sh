#!/usr/bin/env bash
# Builds perfmon's Debian packages, perfmon-dkms and pfm (debian/), into
# build/deb/, and runs lintian on them; prints the .changes file's path.
#
# The source is staged in build/deb/perfmon-VERSION (the checkout's files,
# committed or not, without build/ and target/), and dpkg-buildpackage -b
# runs there; cargo's target directory is the checkout's target/, so a
# warm build only relinks pfm. lintian's full report goes to
# build/logs/lintian.log; any error (E:) fails.
set -euo pipefail
PFM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$PFM_TOP/scripts/env.sh"

out=$PFM_BUILD/deb
version=$(cd "$PFM_TOP" && dpkg-parsechangelog -SVersion)
stage=$out/perfmon-$version

echo "deb: perfmon-dkms and pfm $version (log: $(pfm_log_name deb))" >&2
rm -rf "$out"; mkdir -p "$stage"
# The checkout's own files: tracked, and new ones not ignored.
(cd "$PFM_TOP" && git ls-files -z --cached --others --exclude-standard --deduplicate |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$stage"

build() (
	cd "$stage"
	CARGO_TARGET_DIR=$PFM_TOP/target dpkg-buildpackage -b -us -uc
)
pfm_quiet deb build
changes=$(ls "$out"/perfmon_"$version"_*.changes)
rm -rf "$stage"

log=$PFM_BUILD/logs/lintian.log
lintian --info --display-info "$changes" >"$log" 2>&1 || true
errors=$(grep -c '^E: ' "$log" || true)
warnings=$(grep -c '^W: ' "$log" || true)
echo "deb: $(cd "$out" && ls ./*.deb | sed 's|^\./||' | tr '\n' ' ')" >&2
echo "lintian: $errors errors, $warnings warnings (log: $(pfm_log_name lintian))" >&2
if [ "$errors" != 0 ]; then
	grep '^E: ' "$log" | sed 's/^/  | /' >&2
	exit 1
fi
echo "$changes"
