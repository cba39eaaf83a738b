package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	"github.com/jackc/pgx/v5"
)

// batchView is a batch's view of the job rows it holds, as they stand in
// the batch: its mutations read and decide against it, in order, and
// write nothing to the database until the batch ends (flushJobs: one
// statement per kind of write, whatever the number of jobs). A mutation
// that fails is undone in the view alone: nothing of it reached the
// database, so no savepoint is needed.
type batchView struct {
	// rows are every job row the batch holds locked and may change: read
	// at its start (opPlan.jobs), created by it, or taken by its claims.
	rows map[uint64]*db.JobRecord
	// asked are the ids read at the start: one absent from rows does not
	// exist.
	asked    map[uint64]bool
	dirty    map[uint64]bool // rows changed: updated at the end
	inserted map[uint64]bool // rows created: inserted at the end
	ids      []int64         // job ids taken from the sequence at the start, unused yet
	// idem are the jobs found at the start holding the idempotency keys
	// the batch's enqueues name (read, not locked: the key's advisory
	// lock keeps it), nil for a key no job holds; keys are created in the
	// batch are in keys.
	idem map[idemPair]*db.JobRecord
	keys map[idemPair]uint64
	// paused is the set of paused queues, read at the start and kept by
	// the batch's own pauses and resumes.
	paused map[string]bool
	// pool are the claim candidates fetched per queue (candidatesSQL), in
	// claim order, locked for the batch; promoted says the batch promoted
	// the due scheduled jobs.
	pool     map[string]*queuePool
	promoted bool
	// counts are changes of the batch as a whole (promotions), kept
	// whatever becomes of the mutation that made them.
	counts map[countKey]int64
	undo   []func()
	// versions are the rows' versions (xmin) when read by an early read
	// (early.go), which the batch checks at its commit; nil otherwise.
	versions map[uint64]string
}

type idemPair struct{ queue, key string }

// queuePool are one queue's fetched candidates not taken yet. readyFull
// (expiredFull): the fetch returned as many as it asked for, so the table
// may hold more beyond them.
type queuePool struct {
	ready, expired         []*db.JobRecord
	readyFull, expiredFull bool
}

func newBatchView() *batchView {
	return &batchView{rows: map[uint64]*db.JobRecord{}, asked: map[uint64]bool{}, dirty: map[uint64]bool{},
		inserted: map[uint64]bool{}, idem: map[idemPair]*db.JobRecord{}, keys: map[idemPair]uint64{},
		paused: map[string]bool{}, pool: map[string]*queuePool{}}
}

// rollback undoes what the view recorded since mark (len(v.undo) then).
func (v *batchView) rollback(mark int) {
	for i := len(v.undo) - 1; i >= mark; i-- {
		v.undo[i]()
	}
	v.undo = v.undo[:mark]
}

// hold adds rec, read locked from the table, to the rows.
func (v *batchView) hold(rec *db.JobRecord) {
	id := rec.ID
	prev, had := v.rows[id]
	v.rows[id] = rec
	v.undo = append(v.undo, func() {
		if had {
			v.rows[id] = prev
		} else {
			delete(v.rows, id)
		}
	})
}

// put records rec as the batch's new version of its row (created with
// insert), as a read of the row written would return it.
func (v *batchView) put(rec *db.JobRecord, insert bool) error {
	c := rec.Clone()
	c.Result, c.Attestation = nullResult(rec.Result), nullResult(rec.Attestation)
	if len(c.Errors) == 0 {
		c.Errors = nil
	} else {
		// Kept as the column's bytes read back would give them.
		b, err := encodeErrors(c.Errors)
		if err != nil {
			return err
		}
		c.Errors = nil
		if err := msgrec.Unmarshal(b, &c.Errors); err != nil {
			return err
		}
	}
	id := c.ID
	prev, had := v.rows[id]
	wasDirty, wasInserted := v.dirty[id], v.inserted[id]
	v.rows[id] = &c
	v.dirty[id] = true
	if insert {
		v.inserted[id] = true
	}
	v.undo = append(v.undo, func() {
		if had {
			v.rows[id] = prev
		} else {
			delete(v.rows, id)
		}
		if !wasDirty {
			delete(v.dirty, id)
		}
		if !wasInserted {
			delete(v.inserted, id)
		}
	})
	return nil
}

// job returns the batch's copy of job id to change: from the rows, or
// read and locked now (a mutation that did not declare it).
func (w *writer) job(id uint64) (*db.JobRecord, error) {
	v := w.v
	if r, ok := v.rows[id]; ok {
		c := r.Clone()
		return &c, nil
	}
	if v.asked[id] {
		return nil, db.JobNotFound(id)
	}
	rec, err := getJob(w.ctx, w.tx, id, true)
	if err != nil {
		return nil, err
	}
	v.hold(rec)
	c := rec.Clone()
	return &c, nil
}

// newID returns the next job id: one taken at the batch's start, or from
// the sequence now.
func (w *writer) newID() (uint64, error) {
	v := w.v
	if len(v.ids) > 0 {
		ids := v.ids
		v.ids = ids[1:]
		v.undo = append(v.undo, func() { v.ids = ids })
		return uint64(ids[0]), nil
	}
	var id int64
	err := w.tx.QueryRow(w.ctx, `SELECT nextval('fenceq_job_id')`).Scan(&id)
	return uint64(id), err
}

// byKey returns the job of queue that holds key, or nil: one the batch
// created, one found at its start, or one read now.
func (w *writer) byKey(queue, key string) (*db.JobRecord, error) {
	v := w.v
	k := idemPair{queue, key}
	if id, ok := v.keys[k]; ok {
		return v.rows[id], nil
	}
	rec, ok := v.idem[k]
	if !ok {
		var err error
		rec, err = scanJob(w.tx.QueryRow(w.ctx, `SELECT `+jobColumns+` FROM fenceq_jobs WHERE queue = $1 AND idempotency_key = $2`, queue, []byte(key)))
		if errors.Is(err, pgx.ErrNoRows) {
			rec, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	if rec != nil {
		if r, ok := v.rows[rec.ID]; ok {
			return r, nil // changed by the batch
		}
	}
	return rec, nil
}

// keyTaken records that the batch created job id holding key of queue.
func (v *batchView) keyTaken(queue, key string, id uint64) {
	k := idemPair{queue, key}
	v.keys[k] = id
	v.undo = append(v.undo, func() { delete(v.keys, k) })
}

// take removes the head of one of p's lists (which it was) for a claim.
func (v *batchView) take(p *queuePool, rec *db.JobRecord) {
	old := *p
	v.undo = append(v.undo, func() { *p = old })
	if len(p.ready) > 0 && p.ready[0] == rec {
		p.ready = p.ready[1:]
	} else if len(p.expired) > 0 && p.expired[0] == rec {
		p.expired = p.expired[1:]
	}
}

// trim drops from the heads of p's lists the rows the batch holds in
// rows (they are the rows' candidates now, kept there).
func (v *batchView) trim(p *queuePool) {
	for _, l := range []*[]*db.JobRecord{&p.ready, &p.expired} {
		for len(*l) > 0 {
			if _, ok := v.rows[(*l)[0].ID]; !ok {
				break
			}
			old := *p
			v.undo = append(v.undo, func() { *p = old })
			*l = (*l)[1:]
		}
	}
}

// fill adds fetched candidates of queues to the pool: rows the batch
// already holds are left out (the rows are their current version). limit
// is how many of each list per queue the fetch asked for.
func (v *batchView) fill(queues []string, recs []*db.JobRecord, limit map[string]int) {
	for _, q := range queues {
		if v.pool[q] == nil {
			v.pool[q] = &queuePool{}
		}
	}
	nReady, nExpired := map[string]int{}, map[string]int{}
	for _, r := range recs {
		p := v.pool[r.Queue]
		if p == nil {
			continue
		}
		if r.State == db.StateAvailable {
			nReady[r.Queue]++
		} else {
			nExpired[r.Queue]++
		}
		if _, ok := v.rows[r.ID]; ok {
			continue
		}
		if r.State == db.StateAvailable {
			p.ready = append(p.ready, r)
		} else {
			p.expired = append(p.expired, r)
		}
	}
	for _, q := range queues {
		p := v.pool[q]
		sortCandidates(p.ready, p.expired)
		p.readyFull, p.expiredFull = nReady[q] >= limit[q], nExpired[q] >= limit[q]
	}
}

func sortCandidates(ready, expired []*db.JobRecord) {
	slices.SortFunc(ready, func(a, b *db.JobRecord) int {
		if db.ClaimsBefore(a, b) {
			return -1
		}
		return 1
	})
	slices.SortFunc(expired, func(a, b *db.JobRecord) int {
		return cmp.Or(cmp.Compare(a.LeaseExpiresAt, b.LeaseExpiresAt), cmp.Compare(a.ID, b.ID))
	})
}

// heldCandidates are the rows the batch holds that a claim on queues may
// take now: available, or claimed with a lease expired by now.
func (v *batchView) heldCandidates(queues []string, now int64) (ready, expired map[string][]*db.JobRecord) {
	ready, expired = map[string][]*db.JobRecord{}, map[string][]*db.JobRecord{}
	for _, r := range v.rows {
		if !slices.Contains(queues, r.Queue) {
			continue
		}
		switch {
		case r.State == db.StateAvailable:
			ready[r.Queue] = append(ready[r.Queue], r)
		case r.State == db.StateClaimed && r.LeaseExpiresAt <= now:
			expired[r.Queue] = append(expired[r.Queue], r)
		}
	}
	for _, q := range queues {
		sortCandidates(ready[q], expired[q])
	}
	return ready, expired
}

// heldIDs are the ids of the rows the batch holds or has fetched as
// candidates: a statement that must not take them again leaves them out.
func (v *batchView) heldIDs() []int64 {
	ids := make([]int64, 0, len(v.rows))
	for id := range v.rows {
		ids = append(ids, int64(id))
	}
	for _, p := range v.pool {
		for _, r := range p.ready {
			ids = append(ids, int64(r.ID))
		}
		for _, r := range p.expired {
			ids = append(ids, int64(r.ID))
		}
	}
	return ids
}

func (v *batchView) count(queue string, state db.State, delta int64) {
	if v.counts == nil {
		v.counts = map[countKey]int64{}
	}
	v.counts[countKey{queue, state}] += delta
}

// flushJobs queues on b the batch's job writes: one UPDATE over arrays for
// every row it changed, one INSERT over arrays for every row it created.
// It returns how many rows each must touch.
func (v *batchView) flushJobs(b *pgx.Batch) (updates, inserts int, err error) {
	var up, in []*db.JobRecord
	for id := range v.dirty {
		if v.inserted[id] {
			in = append(in, v.rows[id])
		} else {
			up = append(up, v.rows[id])
		}
	}
	byID := func(a, b *db.JobRecord) int { return cmp.Compare(a.ID, b.ID) }
	if len(up) > 0 {
		slices.SortFunc(up, byID)
		n := len(up)
		ids, attempts, maxAttempts, lease, runAt, updated, completed := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		states := make([]string, n)
		claimedBy, lastError, errs, result, att := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
		for i, r := range up {
			if errs[i], err = encodeErrors(r.Errors); err != nil {
				return 0, 0, err
			}
			ids[i], states[i], attempts[i], maxAttempts[i] = int64(r.ID), string(r.State), int64(r.Attempts), int64(r.MaxAttempts)
			claimedBy[i], lease[i], runAt[i], updated[i], completed[i] = []byte(r.ClaimedBy), r.LeaseExpiresAt, r.RunAt, r.UpdatedAt, r.CompletedAt
			lastError[i], result[i], att[i] = []byte(r.LastError), nilIfEmpty(r.Result), nilIfEmpty(r.Attestation)
		}
		args := []any{ids, states, attempts, maxAttempts, claimedBy, lease, runAt, updated, completed, lastError, errs, result, att}
		if v.versions == nil {
			b.Queue(updateJobsSQL, args...)
		} else {
			// Decided against an early read: each row must still be the
			// version it read, or the statement fails the batch (early.go).
			versions := make([]string, n)
			for i, r := range up {
				versions[i] = v.versions[r.ID]
			}
			b.Queue(updateJobsCheckedSQL, append(args, versions, n)...)
		}
	}
	if len(in) > 0 {
		slices.SortFunc(in, byID)
		n := len(in)
		ids, prio, attempts, maxAttempts, budget := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		lease, runAt, created, updated, completed := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		queues, states := make([]string, n), make([]string, n)
		kind, payload, claimedBy, lastError, errs, result, att, idem := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
		scheds, schedFors, backfilled := make([]*string, n), make([]*int64, n), make([]bool, n)
		for i, r := range in {
			scheds[i], schedFors[i] = scheduleColumns(r)
			backfilled[i] = r.Backfilled
			if errs[i], err = encodeErrors(r.Errors); err != nil {
				return 0, 0, err
			}
			ids[i], queues[i], kind[i], payload[i], prio[i], states[i] = int64(r.ID), r.Queue, []byte(r.Kind), nilIfEmpty(r.Payload), r.Priority, string(r.State)
			attempts[i], maxAttempts[i], budget[i], claimedBy[i] = int64(r.Attempts), int64(r.MaxAttempts), int64(r.Budget), []byte(r.ClaimedBy)
			lease[i], runAt[i], created[i], updated[i], completed[i] = r.LeaseExpiresAt, r.RunAt, r.CreatedAt, r.UpdatedAt, r.CompletedAt
			lastError[i], result[i], att[i] = []byte(r.LastError), nilIfEmpty(r.Result), nilIfEmpty(r.Attestation)
			if r.IdempotencyKey != "" {
				idem[i] = []byte(r.IdempotencyKey)
			}
		}
		b.Queue(`INSERT INTO fenceq_jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, budget, claimed_by,
			lease_expires_at, run_at, created_at, updated_at, completed_at, last_error, errors, result, attestation, idempotency_key,
			schedule, scheduled_for, backfilled)
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[], $9::bigint[],
			  $10::bytea[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bytea[], $17::bytea[], $18::bytea[],
			  $19::bytea[], $20::bytea[], $21::text[], $22::bigint[], $23::boolean[])`,
			ids, queues, kind, payload, prio, states, attempts, maxAttempts, budget, claimedBy, lease, runAt, created, updated, completed,
			lastError, errs, result, att, idem, scheds, schedFors, backfilled)
	}
	return len(up), len(in), nil
}

// updateJobsSQL writes the rows of arrays $1..$13, one per job, by id.
// updateJobsCheckedSQL does so only where each row is still the version of
// $14 (xmin), and divides by zero unless all $15 were (early.go).
var (
	updateJobsSQL        = updateJobs(``, ``) + ` WHERE j.id = u.id`
	updateJobsCheckedSQL = `WITH w AS (` + updateJobs(`, $14::text[]`, `, x`) + ` WHERE j.id = u.id AND j.xmin::text = u.x RETURNING 1)
	SELECT 1 / ((SELECT count(*) FROM w) = $15)::int`
)

func updateJobs(array, column string) string {
	return `UPDATE fenceq_jobs AS j SET state = u.state, attempts = u.attempts, max_attempts = u.max_attempts, claimed_by = u.claimed_by,
	lease_expires_at = u.lease, run_at = u.run_at, updated_at = u.updated_at, completed_at = u.completed_at, last_error = u.last_error,
	errors = u.errors, result = u.result, attestation = u.attestation
	FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bytea[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[],
	  $10::bytea[], $11::bytea[], $12::bytea[], $13::bytea[]` + array + `)
	  AS u(id, state, attempts, max_attempts, claimed_by, lease, run_at, updated_at, completed_at, last_error, errors, result, attestation` + column + `)`
}

// nilIfEmpty is b for a nullable column: NULL when empty (see nullBytes).
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// checkWritten reports a job write that touched fewer rows than the batch
// holds: a row gone from under the batch's lock is a fault.
func checkWritten(what string, got int64, want int) error {
	if got != int64(want) {
		return fmt.Errorf("db: postgres: the batch's %s wrote %d job rows, want %d", what, got, want)
	}
	return nil
}
