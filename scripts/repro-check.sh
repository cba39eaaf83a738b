#!/usr/bin/env bash
# Reproducibility check: clone the current commit twice, at two different
# paths, build each with its own empty Go build cache (scripts/release.sh),
# and compare the two SHA256SUMS. Exits non-zero when they differ.
#
#   scripts/repro-check.sh               all release targets
#   TARGETS=linux/arm/7 scripts/repro-check.sh   one target (what CI runs)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$src" rev-parse HEAD)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

build() { # build SIDE CLONE-PATH
  local side=$1 dir=$2
  git clone -q --no-checkout "$src" "$dir"
  git -C "$dir" checkout -q --detach "$commit"
  mkdir -p "$work/cache-$side"
  (cd "$dir" && GOCACHE="$work/cache-$side" scripts/release.sh "$work/dist-$side" >"$work/log-$side" 2>&1) ||
    { cat "$work/log-$side"; return 1; }
}
build a "$work/a/fenceq"
build b "$work/b/a/longer/path/elsewhere/fenceq-clone"
echo "== SHA256SUMS of $commit, clone 1 ($work/a/fenceq):"
cat "$work/dist-a/SHA256SUMS"
echo "== clone 2 ($work/b/a/longer/path/elsewhere/fenceq-clone):"
cat "$work/dist-b/SHA256SUMS"
if cmp -s "$work/dist-a/SHA256SUMS" "$work/dist-b/SHA256SUMS"; then
  echo "repro-check: identical ($(wc -l <"$work/dist-a/SHA256SUMS") archives)"
else
  echo "repro-check: SHA256SUMS differ" >&2
  exit 1
fi
