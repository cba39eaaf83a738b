package postgres

import (
	"context"
	"time"

	"github.com/fenceq/fenceq/db"
)

type transition = func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)

// fencedBatch applies each item's transition in one transaction: an item
// the rules refuse (or that failed validation, invalid[i]) gets its refusal
// and writes nothing; a fault fails the whole batch.
func fencedBatch(w *writer, ids []uint64, invalid []error, ts []transition) ([]db.ItemResult, error) {
	out := make([]db.ItemResult, len(ids))
	for i, id := range ids {
		if invalid[i] != nil {
			out[i].Err = invalid[i]
			continue
		}
		rec, err := changeIn(w, id, ts[i])
		if err != nil {
			if !db.IsRefusal(err) {
				return nil, err
			}
			out[i].Err = err
			continue
		}
		out[i].Job = rec.Job()
	}
	return out, nil
}

// finished reports whether a batch of completions or failures finished a
// job: its worker will likely call again at once (gather.go).
func finished(items []db.ItemResult) bool {
	for _, it := range items {
		if it.Err == nil {
			return true
		}
	}
	return false
}

// HeartbeatJobs extends several leases in one transaction, each item
// decided as HeartbeatJob would.
func (s *Store) HeartbeatJobs(ctx context.Context, reqs []db.HeartbeatRequest) ([]db.ItemResult, error) {
	if err := db.ValidateBatch(db.FencedIDs(reqs)); err != nil {
		return nil, err
	}
	ids, invalid, ts := make([]uint64, len(reqs)), make([]error, len(reqs)), make([]transition, len(reqs))
	for i, req := range reqs {
		d, err := s.opts.ValidateHeartbeat(req)
		ids[i], invalid[i] = req.ID, err
		ts[i] = func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Heartbeat(old, req, d, now)
		}
	}
	var out []db.ItemResult
	err := s.updatePlan(ctx, opPlan{jobs: ids, early: true}, func(w *writer) (err error) {
		out, err = fencedBatch(w, ids, invalid, ts)
		return err
	})
	return out, err
}

// CompleteJobs completes several claims in one transaction, each item
// decided as CompleteJob would, then claims req.Next (when set) in it.
func (s *Store) CompleteJobs(ctx context.Context, req db.CompleteBatchRequest) (db.CompleteBatchResult, error) {
	if err := db.ValidateBatch(db.FencedIDs(req.Items)); err != nil {
		return db.CompleteBatchResult{}, err
	}
	var next *db.ClaimRequest
	if req.Next != nil {
		n := *req.Next
		if err := s.opts.NormalizeBatchClaim(&n); err != nil {
			return db.CompleteBatchResult{}, err
		}
		next = &n
	}
	n := len(req.Items)
	ids, invalid, ts := make([]uint64, n), make([]error, n), make([]transition, n)
	for i, item := range req.Items {
		ids[i], invalid[i] = item.ID, s.opts.ValidateComplete(item)
		ts[i] = func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Complete(old, item, now)
		}
	}
	var res db.CompleteBatchResult
	var caller string
	if n > 0 {
		caller = callerOf(req.Items[0].Principal, req.Items[0].Worker)
	}
	err := s.updatePlan(ctx, opPlan{jobs: ids, claim: next, early: true, caller: caller}, func(w *writer) error {
		res = db.CompleteBatchResult{}
		items, err := fencedBatch(w, ids, invalid, ts)
		if err != nil {
			return err
		}
		res.Items = items
		w.back = finished(items)
		if next != nil {
			res.Next, err = claimIn(w, *next)
		}
		return err
	})
	return res, err
}

// FailJobs records several failed attempts in one transaction, each item
// decided as FailJob would.
func (s *Store) FailJobs(ctx context.Context, reqs []db.FailRequest) ([]db.ItemResult, error) {
	if err := db.ValidateBatch(db.FencedIDs(reqs)); err != nil {
		return nil, err
	}
	ids, invalid, ts := make([]uint64, len(reqs)), make([]error, len(reqs)), make([]transition, len(reqs))
	for i, req := range reqs {
		ids[i], invalid[i] = req.ID, s.opts.ValidateFail(req)
		ts[i] = func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return s.opts.Fail(old, req, now)
		}
	}
	var caller string
	if len(reqs) > 0 {
		caller = callerOf(reqs[0].Principal, reqs[0].Worker)
	}
	var out []db.ItemResult
	err := s.updatePlan(ctx, opPlan{jobs: ids, early: true, caller: caller}, func(w *writer) (err error) {
		out, err = fencedBatch(w, ids, invalid, ts)
		w.back = finished(out)
		return err
	})
	return out, err
}
