#!/usr/bin/env bash
# The Python and TypeScript clients (issue 27): Debian's python3 tools,
# the package installed into a fresh venv with no index, mypy --strict and
# pytest against the real binary; the TypeScript package from its lockfile,
# its generated types checked for drift, tsc --strict and node --test (the
# built dist/ is what e2e's worker-protocol suite runs). The Python types'
# drift check is a Go test (internal/sdkgen), run by go test ./... .
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

echo "== clients: Debian's python3-venv, -pytest, -setuptools, -wheel and mypy"
need=()
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need+=('python3-venv=3.11.*')
/usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=('python3-pytest=7.2.*')
/usr/bin/python3 -c 'import mypy' 2>/dev/null || need+=('mypy=1.0.*')
/usr/bin/python3 -c 'import setuptools' 2>/dev/null || need+=('python3-setuptools=66.*')
/usr/bin/python3 -c 'import wheel' 2>/dev/null || need+=('python3-wheel=0.38.*')
if ((${#need[@]})); then .ci/apt-install.sh "${need[@]}"; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/fenceq" .
export FENCEQ_BIN=$work/fenceq

echo "== clients/python: pip install --no-index into a fresh venv"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
cp -r clients/python "$work/python-src"   # build/ and *.egg-info stay out of the work tree
"$work/venv/bin/pip" install -q --no-index --no-build-isolation "$work/python-src"
(cd "$work" && "$work/venv/bin/python" -c 'from fenceq import Client, Worker')

echo "== clients/python: mypy --strict, pytest"
(cd clients/python && /usr/bin/python3 -m mypy --strict --cache-dir "$work/mypy" fenceq tests)
(cd clients/python && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider tests)

if [[ -f clients/typescript/package.json ]]; then
  echo "== clients/typescript: npm ci, tsc --strict, node --test"
  (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "== clients/typescript: src/schema.ts is what openapi-typescript writes from api/openapi.json"
  (cd clients/typescript && node_modules/.bin/openapi-typescript ../../api/openapi.json -o "$work/schema.ts" >/dev/null 2>&1)
  diff -q clients/typescript/src/schema.ts "$work/schema.ts" >/dev/null ||
    { echo "clients/typescript/src/schema.ts drifted from api/openapi.json: run npm run gen in clients/typescript" >&2; exit 1; }
  (cd clients/typescript && npm run --silent build && npm test --silent >"$work/node-test.log" 2>&1) ||
    { cat "$work/node-test.log"; exit 1; }
  grep -E '^# (pass|fail)' "$work/node-test.log"
fi
