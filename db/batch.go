package db

// Batched fenced calls: heartbeats, completions and failures of many jobs
// in one transaction. Each item is decided on its own by the single call's
// rules (ValidateHeartbeat / ValidateComplete / ValidateFail, then
// Heartbeat / Complete / Rules.Fail); a refused item changes nothing and
// does not affect the others. Only a malformed batch (ValidateBatch) is
// refused as a whole.

// MaxFencedBatch bounds the items of one batched heartbeat, completion or
// failure, as MaxClaimBatch bounds a claim.
const MaxFencedBatch = 1000

// ItemResult is one item's outcome in a batch: the job as written, or the
// refusal (an *Error) the single call would have returned, in which case
// nothing of that item was written.
type ItemResult struct {
	Job Job
	Err error
}

// CompleteBatchRequest completes several claims and, when Next is set,
// claims up to Next.Max jobs in the same transaction, whatever the
// completions' outcomes (a refused completion frees its worker's handler
// as much as an accepted one). Next may not wait.
type CompleteBatchRequest struct {
	Items []CompleteRequest
	Next  *ClaimRequest
}

// CompleteBatchResult is the outcome of each completion, in order, and the
// jobs the batch claimed.
type CompleteBatchResult struct {
	Items []ItemResult
	Next  []Job
}

// ValidateBatch refuses a malformed batch of fenced calls on ids: none, more
// than MaxFencedBatch, or one job named twice (its items would depend on
// each other's order). The refusal names the item.
func ValidateBatch(ids []uint64) error {
	if len(ids) == 0 {
		return Errorf(CodeInvalid, "the batch is empty; give at least one job")
	}
	if len(ids) > MaxFencedBatch {
		return Errorf(CodeInvalid, "the batch has %d jobs; at most %d per call", len(ids), MaxFencedBatch)
	}
	seen := make(map[uint64]int, len(ids))
	for i, id := range ids {
		if j, dup := seen[id]; dup {
			return Errorf(CodeInvalid, "jobs[%d]: job %d is already in the batch at jobs[%d]", i, id, j)
		}
		seen[id] = i
	}
	return nil
}

// NormalizeBatchClaim prepares the claim that follows a batch of
// completions in the same transaction: like a claim, but it cannot wait.
func (r *Rules) NormalizeBatchClaim(next *ClaimRequest) error {
	if next.Wait != 0 {
		return Errorf(CodeInvalid, "claim_next cannot wait")
	}
	return r.NormalizeClaim(next)
}

// FencedIDs returns the job ids of a batch, for ValidateBatch.
func FencedIDs[T interface{ fencedID() uint64 }](items []T) []uint64 {
	ids := make([]uint64, len(items))
	for i, it := range items {
		ids[i] = it.fencedID()
	}
	return ids
}

func (f Fenced) fencedID() uint64 { return f.ID }
