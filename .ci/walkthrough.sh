#!/usr/bin/env bash
# The docs' walkthrough test (e2e/walkthrough_test.go, run by .ci/run's "go test ./...")
# pastes the README's and docs/' shell blocks into bash: they need curl,
# sed and grep. Install curl when a fresh machine lacks it; the test then
# fails (it does not skip) if the blocks cannot run.
set -euo pipefail
if command -v curl >/dev/null; then
  echo "found $(curl --version | head -n 1)"
  exit 0
fi
apt=(apt-get); [[ $(id -u) -ne 0 ]] && apt=(sudo -n apt-get)
DEBIAN_FRONTEND=noninteractive timeout 300 "${apt[@]}" -qq update
# Debian 12's curl; the blocks use only long-standing options (-s -w -o -H -d -X).
DEBIAN_FRONTEND=noninteractive timeout 600 "${apt[@]}" -qq -y install curl
curl --version | head -n 1
