#!/usr/bin/env bash
# The docs' walkthrough test (e2e/walkthrough_test.go, run by .ci/run's "go test ./...")
# pastes the README's and docs/' shell blocks into bash and into zsh (as an
# interactive zsh reads a paste: the default shell on macOS): they need
# curl, sed, grep and both shells. Install curl and zsh when a fresh
# machine lacks them; the test then fails (it does not skip) if the blocks
# cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v curl >/dev/null || missing+=(curl) # Debian 12's; the blocks use only long-standing options (-s -w -o -H -d -X)
command -v zsh >/dev/null || missing+=('zsh=5.9-*') # Debian 12's zsh 5.9, the series macOS ships
if [[ ${#missing[@]} -gt 0 ]]; then
  .ci/apt-install.sh "${missing[@]}"
fi
echo "found $(curl --version | head -n 1)"
echo "found $(zsh --version)"
