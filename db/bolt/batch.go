package bolt

import (
	"context"
	"time"

	"github.com/fenceq/fenceq/db"
)

// transition is a fenced call's rule applied to a job record (db.Heartbeat,
// db.Complete, db.Rules.Fail with the request bound).
type transition = func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)

// HeartbeatJobs extends several leases in one commit, each item decided as
// HeartbeatJob would: an item the rules refuse gets that refusal in its
// result and writes nothing. A malformed batch (db.ValidateBatch) is
// refused as a whole.
func (s *Store) HeartbeatJobs(ctx context.Context, reqs []db.HeartbeatRequest) ([]db.ItemResult, error) {
	if err := db.ValidateBatch(db.FencedIDs(reqs)); err != nil {
		return nil, err
	}
	op := newBatchOp(s, len(reqs))
	for i, req := range reqs {
		d, err := s.opts.ValidateHeartbeat(req)
		op.add(i, req.ID, err, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Heartbeat(old, req, d, now)
		})
	}
	if err := s.update(ctx, op); err != nil {
		return nil, err
	}
	return op.results(), nil
}

// CompleteJobs completes several claims in one commit, each item decided
// as CompleteJob would, and then claims req.Next (when set) in the same
// commit, whatever the items' outcomes.
func (s *Store) CompleteJobs(ctx context.Context, req db.CompleteBatchRequest) (db.CompleteBatchResult, error) {
	if err := db.ValidateBatch(db.FencedIDs(req.Items)); err != nil {
		return db.CompleteBatchResult{}, err
	}
	op := newBatchOp(s, len(req.Items))
	if req.Next != nil {
		next := *req.Next
		if err := s.opts.NormalizeBatchClaim(&next); err != nil {
			return db.CompleteBatchResult{}, err
		}
		op.next = &next
	}
	for i, item := range req.Items {
		op.add(i, item.ID, s.opts.ValidateComplete(item), func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Complete(old, item, now)
		})
	}
	if err := s.update(ctx, op); err != nil {
		return db.CompleteBatchResult{}, err
	}
	return db.CompleteBatchResult{Items: op.results(), Next: jobsOf(op.got)}, nil
}

// FailJobs records several failed attempts in one commit, each item
// decided as FailJob would.
func (s *Store) FailJobs(ctx context.Context, reqs []db.FailRequest) ([]db.ItemResult, error) {
	if err := db.ValidateBatch(db.FencedIDs(reqs)); err != nil {
		return nil, err
	}
	op := newBatchOp(s, len(reqs))
	for i, req := range reqs {
		op.add(i, req.ID, s.opts.ValidateFail(req), func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return s.opts.Fail(old, req, now)
		})
	}
	if err := s.update(ctx, op); err != nil {
		return nil, err
	}
	return op.results(), nil
}

// batchOp is a batch of fenced calls as one mutation: decide runs each
// item's decision (the single call's fencedOp.decide) and keeps the
// refusals as that item's outcome, so a refused item cannot stop the
// others; apply writes the accepted items one step each (each followed by
// the hand-off of what it made available, as for single calls), then the
// claim's steps. A fault (not a refusal) in any item fails the whole batch.
type batchOp struct {
	s        *Store
	items    []fencedOp
	errs     []error // per item: the refusal, or nil
	invalid  []error // per item: the validation refusal, found before the commit
	accepted []int   // items decide accepted, in order
	next     *db.ClaimRequest
	got      []*jobRecord
}

func newBatchOp(s *Store, n int) *batchOp {
	return &batchOp{s: s, items: make([]fencedOp, n), errs: make([]error, n), invalid: make([]error, n)}
}

func (op *batchOp) add(i int, id uint64, invalid error, t transition) {
	op.items[i] = fencedOp{id: id, transition: t}
	op.invalid[i] = invalid
}

func (op *batchOp) decide(r reader, now time.Time) error {
	op.accepted = op.accepted[:0]
	for i := range op.items {
		op.errs[i] = op.invalid[i]
		if op.errs[i] != nil {
			continue
		}
		err := op.items[i].decide(r, now)
		if err != nil && !db.IsRefusal(err) {
			return err
		}
		if op.errs[i] = err; err == nil {
			op.accepted = append(op.accepted, i)
		}
	}
	return nil
}

func (op *batchOp) apply(w *writer, step int) (bool, error) {
	if step < len(op.accepted) {
		if _, err := op.items[op.accepted[step]].apply(w, 0); err != nil {
			return false, err
		}
		return step+1 < len(op.accepted) || op.next != nil, nil
	}
	if op.next == nil {
		return false, nil
	}
	return op.s.claimSteps(w, step-len(op.accepted), *op.next, &op.got)
}

func (op *batchOp) results() []db.ItemResult {
	out := make([]db.ItemResult, len(op.items))
	for i := range op.items {
		if op.errs[i] != nil {
			out[i].Err = op.errs[i]
			continue
		}
		out[i].Job = op.items[i].rec.job()
	}
	return out
}
