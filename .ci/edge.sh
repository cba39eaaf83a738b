#!/usr/bin/env bash
# Edge and operator checks (issue 17): the ARM release builds run under
# qemu (.ci/qemu.sh), the systemd unit verifies (.ci/systemd.sh), and a
# release build is reproducible: two clones at different paths with empty
# build caches give the same SHA256SUMS. CI checks that for the armv7 target
# only (each side is a full build of the standard library and the
# dependencies); "scripts/repro-check.sh" with no TARGETS checks all four.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== qemu: the arm64 and armv7 release builds (.ci/qemu.sh)"
.ci/qemu.sh
echo "== systemd unit (.ci/systemd.sh)"
.ci/systemd.sh
echo "== reproducible release build, linux/armv7 (scripts/repro-check.sh)"
TARGETS=linux/arm/7 scripts/repro-check.sh
