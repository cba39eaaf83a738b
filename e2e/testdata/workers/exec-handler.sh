#!/bin/sh
# The command "fenceq worker --exec" runs in the worker-protocol suite
# (e2e/workerprotocol_test.go). stdin: {"sleep_ms": N, "result": "R"}. It
# prints a start event (with its pid: the suite watches it to see the
# command killed when the claim is lost) to stderr, which the worker
# passes on to its own, sleeps N ms and prints {"by": worker, "r": R}.
p=$(cat)
ms=$(printf '%s' "$p" | sed -nE 's/.*"sleep_ms":([0-9]+).*/\1/p')
r=$(printf '%s' "$p" | sed -nE 's/.*"result":"([^"]*)".*/\1/p')
printf '{"event":"start","id":%s,"token":%s,"pid":%s,"sleep_ms":%s}\n' "$FENCEQ_JOB_ID" "$FENCEQ_FENCING_TOKEN" $$ "${ms:-0}" >&2
sleep "$(awk "BEGIN { print ${ms:-0} / 1000 }")"
printf '{"by":"%s","r":"%s"}\n' "$FENCEQ_WORKER" "$r"
