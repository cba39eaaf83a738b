#!/usr/bin/env bash
# The OpenAPI document held to tools nobody here wrote (issue 18 items 12,
# 13, 17), on the document a real fenceq serves at GET /openapi.json:
#
#   1. redocly lint (.ci/apitools/redocly.yaml): no problem at all;
#   2. openapi-typescript, then tsc --strict on .ci/apitools/readme_enqueue.ts
#      (the README's enqueue request must type-check);
#   3. Prism's validating proxy (--errors) on 127.0.0.1:7420 in front of
#      fenceq on a free port, while the README's walkthrough blocks (a
#      ```sh block right after a line "<!-- test: walkthrough -->") run in
#      order in one bash: no request or reply may break the document.
#
# The tools are npm packages at the versions of .ci/node/package-lock.json,
# installed into .ci/node/node_modules (npm ci). Needs Node.js >= 20.19 and
# npm, curl and Go. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

fail() { echo "apitools: $*" >&2; exit 1; }

echo "== apitools: npm ci (.ci/node/package-lock.json)"
command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (Node.js >= 20.19)"
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&b>=19)?0:1)' ||
  fail "Node.js $(node --version) is too old: the pinned tools need >= 20.19"
npm ci --prefix .ci/node --no-audit --no-fund --loglevel=error >/dev/null
bin=$root/.ci/node/node_modules/.bin

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# wait_for URL: up to 30 s for a reply.
wait_for() {
  for _ in $(seq 150); do curl -s -o /dev/null "$1" && return 0; sleep 0.2; done
  return 1
}

echo "== apitools: fenceq serving (no --auth-file, as the README runs it)"
go build -o "$work/fenceq" .
"$work/fenceq" serve --db "$work/fenceq.db" --listen 127.0.0.1:0 >"$work/fenceq.log" 2>&1 &
pids+=($!)
upstream=
for _ in $(seq 150); do
  upstream=$(sed -nE 's/.*msg="fenceq serving".* listen=(http:\/\/[^ ]+).*/\1/p' "$work/fenceq.log")
  [[ -n $upstream ]] && break
  sleep 0.2
done
[[ -n $upstream ]] || { cat "$work/fenceq.log" >&2; fail "fenceq did not start"; }
curl -fsS "$upstream/openapi.json" -o "$work/openapi.json"
echo "fenceq at $upstream"

echo "== apitools: redocly lint"
lint=0
"$bin/redocly" lint --config .ci/apitools/redocly.yaml --format=stylish "$work/openapi.json" >"$work/redocly.log" 2>&1 || lint=$?
grep -v '[║╔╚]' "$work/redocly.log" | sed '/^[[:space:]]*$/d' || true # without its Node.js banner
[[ $lint -eq 0 ]] || fail "redocly lint found problems in the served document (above)"

echo "== apitools: openapi-typescript + tsc --strict"
mkdir "$work/ts"
"$bin/openapi-typescript" "$work/openapi.json" -o "$work/ts/openapi.d.ts" >/dev/null
cp .ci/apitools/readme_enqueue.ts "$work/ts/"
(cd "$work/ts" && "$bin/tsc" --strict --noEmit --target es2022 --module esnext --moduleResolution bundler readme_enqueue.ts) ||
  fail "the types generated from the document refuse the README's enqueue request"
echo "readme_enqueue.ts compiles"

echo "== apitools: Prism proxy over the README's walkthrough"
# The README's blocks talk to port 7420; Prism must be the one answering.
# On a shared machine another test may hold it for a moment: wait up to
# APITOOLS_PORT_WAIT seconds (default 60) for it to be free.
port_busy() { (exec 3<>/dev/tcp/127.0.0.1/7420) 2>/dev/null; }
waited=0
while port_busy; do
  if [[ $waited -ge ${APITOOLS_PORT_WAIT:-60} ]]; then
    fail "port 7420 is taken (something listens on 127.0.0.1:7420, waited ${waited}s); stop it: the README's walkthrough talks to that port"
  fi
  [[ $waited -eq 0 ]] && echo "port 7420 is taken; waiting for it to be free"
  sleep 2; waited=$((waited + 2))
done
awk '
  /^<!-- test: walkthrough -->[[:space:]]*$/ { marked = NR; next }
  /^```sh[[:space:]]*$/ && marked == NR - 1 { inblock = 1; n++; print "# --- walkthrough block " n " (README.md line " NR ")"; next }
  /^```/ && inblock { inblock = 0; next }
  inblock { print }
' README.md >"$work/walkthrough.sh"
blocks=$(grep -c '^# --- walkthrough block' "$work/walkthrough.sh" || true)
[[ $blocks -gt 0 ]] || fail "README.md has no walkthrough blocks (<!-- test: walkthrough --> before a \`\`\`sh fence)"
"$bin/prism" proxy --errors --host 127.0.0.1 --port 7420 "$work/openapi.json" "$upstream" >"$work/prism.log" 2>&1 &
pids+=($!)
wait_for http://127.0.0.1:7420/healthz || { cat "$work/prism.log" >&2; fail "Prism did not start on 127.0.0.1:7420"; }
echo "running $blocks walkthrough blocks through Prism"
ran=0
(cd "$work" && bash -e walkthrough.sh >"$work/walkthrough.out" 2>&1) || ran=$?
# Prism logs every request it had to refuse or whose reply broke the
# document (--errors answers those with 422 or 500 problem+json, whose
# "validation" says what broke).
if grep -E '✖|VALIDATOR|[Vv]iolation' "$work/prism.log" >"$work/violations"; then
  echo "the walkthrough's output:" >&2; cat "$work/walkthrough.out" >&2
  echo "Prism:" >&2; cat "$work/violations" >&2
  echo "what broke:" >&2; grep -oE '"(detail|validation)":("[^"]*"|\[.*\])' "$work/walkthrough.out" | sort | uniq -c >&2 || true
  fail "requests or replies of the README's walkthrough break the document (above)"
fi
if [[ $ran -ne 0 ]]; then
  cat "$work/walkthrough.out" >&2
  fail "a walkthrough block failed with status $ran (output above)"
fi
requests=$(grep -c 'Request received' "$work/prism.log" || true)
echo "Prism validated $requests requests and their replies: none breaks the document"

echo "== apitools: what the document refuses, Prism refuses and fenceq answers 400 (issue 31)"
# Each request breaks a rule the document states (QueueName's pattern on a
# path, run_at with delay_ms, claim_next without a worker, equal batch
# items, a worker over maxLength, a null body): Prism, validating against
# the document alone, must refuse it (422), and fenceq itself must answer
# it 400 with nothing done.
broken=(
  "POST /v1/queues/a%20b/pause "
  'POST /v1/jobs {"queue":"apitools","run_at":"2030-01-02T03:04:05Z","delay_ms":1000}'
  'POST /v1/jobs/complete {"jobs":[{"id":999999,"worker":"w1"}],"claim_next":{"queues":["apitools"]}}'
  'POST /v1/jobs/fail {"worker":"w1","jobs":[{"id":999999},{"id":999999}]}'
  "POST /v1/jobs/heartbeat {\"worker\":\"$(printf 'w%.0s' $(seq 201))\",\"jobs\":[{\"id\":999999,\"worker\":\"w1\"}]}"
  'POST /v1/jobs null'
)
for b in "${broken[@]}"; do
  read -r method path body <<<"$b"
  args=(-s -o /dev/null -w '%{http_code}' -X "$method" -H 'Content-Type: application/json')
  [[ -n $body ]] && args+=(-d "$body")
  via_prism=$(curl "${args[@]}" "http://127.0.0.1:7420$path")
  direct=$(curl "${args[@]}" "$upstream$path")
  [[ $via_prism == 422 && $direct == 400 ]] ||
    fail "$method $path ${body:0:80}: Prism answered $via_prism (want 422: the document refuses it), fenceq $direct (want 400)"
  echo "refused by the document and by fenceq: $method $path ${body:0:60}"
done
