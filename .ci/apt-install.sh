#!/usr/bin/env bash
# .ci/apt-install.sh PACKAGE... — install Debian packages (version globs
# such as 'systemd=252.*' pin the release series: exact versions vanish from
# the mirror with each security update). Quiet unless it fails; then it
# prints apt's log and exits non-zero.
set -euo pipefail
apt=(apt-get); [[ $(id -u) -ne 0 ]] && apt=(sudo -n apt-get)
log=$(mktemp)
echo "installing $*"
if ! { DEBIAN_FRONTEND=noninteractive timeout 300 "${apt[@]}" -qq update &&
       DEBIAN_FRONTEND=noninteractive timeout 600 "${apt[@]}" -qq -y install "$@"; } >"$log" 2>&1 </dev/null; then
  cat "$log"; echo "apt-install: could not install $*" >&2; exit 1
fi
rm -f "$log"
