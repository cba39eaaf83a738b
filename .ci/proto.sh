#!/usr/bin/env bash
# The protobuf API (proto/, docs/api.md "Protobuf"), held by buf at the
# version of .ci/proto/package-lock.json (npm ci installs @bufbuild/buf):
#
#   1. buf lint (proto/buf.yaml: STANDARD);
#   2. buf breaking against proto/baseline.binpb, the descriptor set of
#      the last release (v1 is the first: the baseline is this version);
#   3. buf generate with local plugins only (protoc-gen-go and
#      protoc-gen-connect-go at go.mod's versions, by go run), for
#      proto/ and the pre-fencing copy e2e/testdata/oldproto; the
#      generated code must be what is committed.
#
# "generate" as the first argument only regenerates (after a .proto
# change); "baseline" writes proto/baseline.binpb anew (at a release).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
npm ci --prefix .ci/proto --no-audit --no-fund --loglevel=error >/dev/null
buf=$root/.ci/proto/node_modules/.bin/buf
echo "found buf $("$buf" --version)"

generate() {
  (cd proto && "$buf" generate)
  (cd e2e/testdata/oldproto && "$buf" generate)
}

case "${1:-}" in
generate) generate; exit 0 ;;
baseline) (cd proto && "$buf" build -o baseline.binpb); exit 0 ;;
esac

echo "== proto: buf lint"
(cd proto && "$buf" lint)
echo "== proto: buf breaking against proto/baseline.binpb"
(cd proto && "$buf" breaking --against baseline.binpb)
echo "== proto: buf generate, then no difference from what is committed"
generate
changed=$(git status --porcelain -- api/fenceqv1 e2e/oldpb)
if [[ -n $changed ]]; then
  echo "the generated code differs from what is committed (run .ci/proto.sh generate and commit):" >&2
  echo "$changed" >&2
  git --no-pager diff --stat -- api/fenceqv1 e2e/oldpb >&2
  exit 1
fi
echo "generated code is what is committed"
