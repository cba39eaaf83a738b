// Package dbtest is the conformance suite every fenceq storage engine must
// pass: Run(t, newStore) exercises a db.Store through its interface only —
// claims and fencing, failures, backoff, dead jobs, retry and cancel,
// idempotency keys, long-polls and hand-offs, named leases, the audit chain
// and history, sweeping — with a model test (rapid) and a linearizability
// check (porcupine). Every refusal is checked by code and message, and
// shown to change nothing.
package dbtest
