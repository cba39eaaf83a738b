// Package lease holds fenceq's rules as pure functions: who holds a claim,
// which fencing tokens are valid, when a lease has expired and how long a
// failed job waits before its next attempt. It does no I/O; every function
// that depends on time takes "now" as an argument.
//
// The fencing rule: every claim of a job increments the job's attempts, and
// that number is the claim's fencing token. A heartbeat, completion or failure
// that carries a token is applied only while the job is still claimed by the
// same holder (principal|worker) and the token equals the job's current
// attempts. A worker that was paused past its lease, whose job was claimed
// again — even by a restart of itself under the same worker name — therefore
// carries a smaller number than the current claim and is refused. A token of
// zero means "not given" and leaves only the holder check; a token above
// MaxToken cannot be a claim number and is invalid, never read as "none".
package lease
