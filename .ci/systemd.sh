#!/usr/bin/env bash
# contrib/systemd/fenceq.service passes "systemd-analyze verify" with no
# complaint at all (verify exits 0 on keys it ignores, so any output fails
# here), its offline security exposure stays at or below 2.0, and every
# FENCEQ_* variable the example environment file names is a real flag.
#
# systemd need not run (this runs in containers where PID 1 is not
# systemd): verify and security --offline load the unit into an offline
# manager. What they need is the unit's world: the ExecStart binary
# (/usr/local/bin/fenceq) and the system's own units (sysinit.target, …).
# So the check builds a root directory with the binary just built and a copy
# of /usr/lib/systemd/system, and runs with --root, without touching the
# machine's /usr/local. Installs Debian's systemd (bookworm's 252) when
# systemd-analyze is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v systemd-analyze >/dev/null; then
  .ci/apt-install.sh 'systemd=252.*'
fi
echo "$(systemd-analyze --version | head -1); PID 1 is $(ps -p 1 -o comm= 2>/dev/null || echo unknown)"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
CGO_ENABLED=0 go build -o "$root/usr/local/bin/fenceq" .
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp contrib/systemd/fenceq.service "$root/etc/systemd/system/"

if ! out=$(systemd-analyze verify --root="$root" fenceq.service 2>&1) || [[ -n $out ]]; then
  echo "systemd-analyze verify contrib/systemd/fenceq.service:"; echo "$out"; exit 1
fi
echo "ok   systemd-analyze verify contrib/systemd/fenceq.service: no complaints"
systemd-analyze security --offline=yes --root="$root" --threshold=20 fenceq.service | tail -1

flags=$("$root/usr/local/bin/fenceq" serve --help 2>&1 || true)
for v in $(grep -oE '^#?FENCEQ_[A-Z_]+' contrib/systemd/fenceq.env | tr -d '#' | sort -u); do
  flag=--$(tr 'A-Z_' 'a-z-' <<<"${v#FENCEQ_}")
  grep -qE -- "^ +-{1,2}${flag#--}( |$)" <<<"$flags" || { echo "fenceq.env names $v, but fenceq serve has no $flag"; exit 1; }
done
echo "ok   every FENCEQ_* variable in contrib/systemd/fenceq.env is a flag of fenceq serve"
