#!/usr/bin/env bash
# The power-loss tests (e2e/powerloss_test.go, internal/lazyfs) mount a FUSE
# filesystem: they need /dev/fuse and fusermount3, from Debian's fuse3
# (3.14.0-4 on bookworm; apt cannot pin below the suite's version). With
# CI=true the tests fail rather than skip when FUSE is missing, so install
# it here when it is not on the machine.
set -euo pipefail
if command -v fusermount3 >/dev/null; then
  echo "found $(fusermount3 --version 2>&1 | head -1); not installing"
  exit 0
fi
apt=(apt-get); [[ $(id -u) -ne 0 ]] && apt=(sudo -n apt-get)
log=/tmp/fenceq-ci-fuse3.log
if { DEBIAN_FRONTEND=noninteractive timeout 300 "${apt[@]}" -qq update &&
     DEBIAN_FRONTEND=noninteractive timeout 300 "${apt[@]}" -qq -y install fuse3; } >"$log" 2>&1 </dev/null; then
  echo "installed fuse3 $(dpkg-query -W -f '${Version}' fuse3 2>/dev/null)"
else
  echo "could not install fuse3 (log: $log)"; cat "$log"; exit 1
fi
if [[ ! -e /dev/fuse ]]; then
  echo "warning: no /dev/fuse on this machine; the power-loss tests will fail under CI=true"
fi
