#!/usr/bin/env bash
# The ARM release builds run: build linux/arm64 and linux/armv7 with
# scripts/release.sh, then run each under Debian's qemu-user-static through
# the smoke checks (internal/smoke: serve on a fresh file, enqueue, claim, a
# stale fencing token refused, complete, restart, the job still completed;
# on armv7 also --max-db-size refusing a write past it while reads go on),
# printing each check. Then the 32-bit-sensitive unit tests (lease, db, db/bolt,
# internal/msgrec, api, api/client: 64-bit atomics, bbolt's map, msgpack
# lengths of 2 GiB or more) run as armv7 test binaries under qemu-arm.
#
# Installs qemu-user-static (Debian bookworm's 7.2) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v qemu-aarch64-static >/dev/null || ! command -v qemu-arm-static >/dev/null; then
  .ci/apt-install.sh 'qemu-user-static=1:7.2+dfsg-7+deb12u*'
fi
echo "$(qemu-aarch64-static --version | head -1); $(qemu-arm-static --version | head -1)"

dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
ALLOW_DIRTY=1 TARGETS="linux/arm64 linux/arm/7" scripts/release.sh "$dist" >/dev/null
smoke() { # smoke ARCH EMULATOR [ARGS]
  local arch=$1 emu=$2; shift 2
  local dir; dir=$(mktemp -d -p "$dist")
  tar -xzf "$dist"/fenceq-*-linux-"$arch".tar.gz -C "$dir" --strip-components=1
  echo "== linux/$arch under $emu"
  go run ./internal/smoke/cmd/fenceq-smoke -bin "$dir/fenceq" -emulator "$emu" "$@"
}
smoke arm64 qemu-aarch64-static
smoke armv7 qemu-arm-static -max-db-size 1048576

echo "== lease, db, db/bolt, internal/msgrec, api and api/client tests as linux/armv7 binaries under qemu-arm-static"
# 32-bit ARM is where unaligned 64-bit atomics panic, where int is 32 bits
# (msgpack lengths, sizes), and where go-json's unsafe code (api's replies,
# api/client's answers) would show a word-size mistake: the whole suites
# run, but for the peak-RSS test, which holds a million jobs and measures
# this process's memory, not the emulated one's.
for pkg in lease db db/bolt internal/msgrec api api/client; do
  name=${pkg//\//-}
  GOARCH=arm GOARM=7 CGO_ENABLED=0 go test -c -o "$dist/$name.test" "./$pkg"
  (cd "$pkg" && qemu-arm-static "$dist/$name.test" -test.count=1 -test.timeout=15m -test.skip='PeakRSS' -test.v >"$dist/$name.log" 2>&1) ||
    { cat "$dist/$name.log"; echo "qemu.sh: $pkg tests failed on armv7" >&2; exit 1; }
  echo "ok   $pkg: $(grep -c '^--- PASS' "$dist/$name.log") tests passed, $(grep -c '^--- SKIP' "$dist/$name.log" || true) skipped: $(grep '^--- SKIP' "$dist/$name.log" | tr '\n' ' ')"
done
