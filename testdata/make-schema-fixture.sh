#!/usr/bin/env bash
# Writes testdata/schema-<V>-<commit>.db: a bbolt file made by the fenceq of
# COMMIT (built from this repository's history with git archive), through
# its HTTP API: six jobs (completed with a result, scheduled after a
# failure, dead, claimed with a long lease, cancelled, available with an
# idempotency key), a named lease released and acquired again (token 2),
# and the audit records of all of it. db/bolt's TestFilesOfEveryEarlierSchemaVersionOpenAndUpgrade
# opens each. Usage: testdata/make-schema-fixture.sh COMMIT VERSION
set -euo pipefail
commit=$1 version=$2
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/src"
git archive "$commit" | tar -x -C "$work/src"
(cd "$work/src" && go build -buildvcs=false -o "$work/fenceq" .)
"$work/fenceq" serve --db "$work/f.db" --listen 127.0.0.1:17431 2>"$work/log" &
pid=$!
base=http://127.0.0.1:17431
for _ in $(seq 100); do curl -fs $base/healthz >/dev/null && break; sleep 0.1; done
post() { curl -s -X POST -H 'Content-Type: application/json' -d "$2" "$base$1"; echo; }
post /v1/jobs '{"queue":"q","kind":"a","payload":{"n":1}}'
post /v1/jobs '{"queue":"q","kind":"b","payload":{"n":2},"max_attempts":3,"idempotency_key":"order-7"}'
post /v1/jobs '{"queue":"q","kind":"c","payload":{"n":3},"max_attempts":1}'
post /v1/claim '{"worker":"w1","queues":["q"],"lease_ms":60000}'
post /v1/jobs/1/complete '{"worker":"w1","fencing_token":1,"result":{"ok":true}}'
post /v1/claim '{"worker":"w1","queues":["q"],"lease_ms":60000}'
post /v1/jobs/2/fail '{"worker":"w1","fencing_token":1,"error":"boom","retry_delay_ms":3600000}'
post /v1/claim '{"worker":"w1","queues":["q"],"lease_ms":60000}'
post /v1/jobs/3/fail '{"worker":"w1","fencing_token":1,"error":"fatal"}'
post /v1/jobs '{"queue":"q","kind":"d","payload":{"n":4}}'
post /v1/claim '{"worker":"w2","queues":["q"],"lease_ms":3600000}'
post /v1/jobs '{"queue":"q","kind":"e","payload":{"n":5}}'
post /v1/jobs/5/cancel '{}'
post /v1/jobs '{"queue":"other","kind":"f","payload":{"n":6}}'
post /v1/leases/data/a/acquire '{"holder":"h1","ttl_ms":60000}'
post /v1/leases/data/a/release '{"holder":"h1","fencing_token":1}'
post /v1/leases/data/a/acquire '{"holder":"h2","ttl_ms":3600000}'
kill -TERM $pid; wait $pid || true
out=testdata/schema-$version-${commit:0:7}.db
cp "$work/f.db" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)"
