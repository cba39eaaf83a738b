package postgres

// Early reads. A Worker's calls come one at a time: it completes the jobs
// a batch claimed for it, with claim_next for as many more, and waits for
// the answer before it sends the next. Each such batch spends a round trip
// locking its rows and reading its candidates before it can decide, while
// the replica's commit stream was idle as the previous answer travelled to
// the Worker and its next call came back.
//
// So after a batch that claimed jobs commits, the replica reads at once,
// before any request asks for it, what the batch that most likely comes
// next will need: in one snapshot (REPEATABLE READ, READ ONLY, committed
// in the same round trip: it holds nothing), the time, the rows the last
// two claiming batches took (their workers complete them next), the
// candidates of the same queues for as many claims, the audit head and the
// paused queues, each row with its version (xmin). Nothing is locked: other
// replicas see and take what they would have.
//
// If that batch comes within earlyWindow and needs no more than was read,
// it decides against the read, and its one round trip checks, before its
// COMMIT, that nothing it decided on changed since: each row it writes is
// still the version it read (its UPDATE matches id and xmin, which locks
// it to the commit, and must write every row), each row it decided on
// without writing it (a refusal) still is too and each id it did not find
// still does not exist (read again), and the audit head, locked after the
// rows as every batch locks it, is where the read left it. A check that
// fails divides by zero, which fails the round trip before its COMMIT
// (errEarlyStale), and the batch runs again as any batch does, from a
// first round trip of its own. A batch that writes nothing checks the same
// without locking. So every decision holds for the rows as they stand when
// the batch commits, as in beginBatch:
//   - the audit head is where the read left it: no other batch that
//     writes an audit link (an enqueue, a claim, a pause) committed in
//     between, so no job became claimable and no queue was paused or
//     resumed meanwhile;
//   - only the time moved. Fenced calls do not depend on it but for the
//     times they write, which may be up to earlyWindow older than the
//     request (as a batch's time may already be older than its commit). A
//     claim does: the read is used for claims only if no scheduled job is
//     due, or becomes due, and no lease of the claim's queues expires
//     within earlyWindow of the read's time (earlyDueSQL), so that it
//     claims what a batch begun on its arrival would; and under a test's
//     clock, only if that clock has not moved since.
// A mutation that needs a statement of its own mid-batch (more candidates
// than were read) fails the batch with errEarlyStale as well.
//
// It reads early only when no other replica committed between this
// replica's last two batches (the head's seq is where this replica left
// it): where replicas take turns, the check would fail and the read would
// be wasted.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// earlyWindow bounds how long an early transaction waits for its batch:
// longer than a Worker's turn between two calls on a loaded 2-core
// machine (under 1 ms; docs/performance.md), short enough that a replica
// that starts writing waits for the head no longer than that.
const earlyWindow = 5 * time.Millisecond

// earlyDueSQL is the earliest time at which a claim on queues $1 could
// take a job it cannot at the batch's time: a scheduled job of any queue
// (the promotion reaches every queue) due then or before (one due already
// waits for a promotion, which an early read does not make), or a lease
// of one of the queues expiring after the batch's time. NULL: none.
const earlyDueSQL = `SELECT least(
	(SELECT min(run_at) FROM fenceq_jobs WHERE state = 'scheduled'),
	(SELECT min(l.at) FROM unnest($1::text[]) AS q(name), LATERAL (SELECT lease_expires_at AS at FROM fenceq_jobs
	  WHERE state = 'claimed' AND queue = q.name AND lease_expires_at > ` + batchNow + ` ORDER BY lease_expires_at LIMIT 1) AS l))`

// The early read's statements: beginBatch's, without locks, each row with
// its version.
var (
	earlyRowsSQL       = `SELECT ` + jobColumns + `, xmin::text FROM fenceq_jobs WHERE id = ANY($1)`
	earlyCandidatesSQL = unlocked(candidatesSQL, 2)
	earlyHeadSQL       = unlocked(headSQL, 0)
)

// unlocked is sql without its row locks, its job rows with their version
// (n of them: every one).
func unlocked(sql string, n int) string {
	out := strings.ReplaceAll(sql, ` FOR UPDATE SKIP LOCKED`, ``)
	out = strings.TrimSuffix(out, ` FOR UPDATE`)
	from := `SELECT ` + jobColumns + ` FROM fenceq_jobs`
	if strings.Count(out, from) != n || strings.Contains(out, `FOR UPDATE`) {
		panic("db: postgres: early read: unexpected statement " + sql)
	}
	return strings.ReplaceAll(out, from, `SELECT `+jobColumns+`, xmin::text AS x FROM fenceq_jobs`)
}

// The checks of a batch decided against an early read, in its round trip:
// the rows it decided on and does not write ($1, with their versions $2:
// "" for a row that did not exist; $3 of them did), and the audit head ($1
// seq, $2 minimum writer, $3 schema version) as the read saw it, locked to
// the commit by a batch that writes. The rows it writes are checked by
// their UPDATE (updateJobsCheckedSQL). A check that fails divides by zero.
const (
	earlyRowsCheck = `SELECT 1 / ((SELECT count(*) FROM l) = $3 AND
	(SELECT count(*) FROM l JOIN unnest($1::bigint[], $2::text[]) AS u(id, x) ON l.id = u.id AND l.x = u.x) = $3)::int`
	earlyRowsCheckSQL = `WITH l AS (SELECT id, xmin::text AS x FROM fenceq_jobs WHERE id = ANY($1)) ` + earlyRowsCheck
	earlyHeadCheck    = ` SELECT 1 / coalesce((SELECT seq = $1 AND min_writer IS NOT DISTINCT FROM $2 FROM h) AND ` + schemaVersionSQL + ` = $3, false)::int`
	earlyHeadLockSQL  = `WITH h AS (SELECT seq, min_writer FROM fenceq_audit_head WHERE id = 1 FOR UPDATE)` + earlyHeadCheck
	earlyHeadCheckSQL = `WITH h AS (SELECT seq, min_writer FROM fenceq_audit_head WHERE id = 1)` + earlyHeadCheck
)

// errEarlyStale: a batch decided against an early read that another
// replica's commit made stale, or that needed more than was read; it runs
// again, from a round trip of its own.
var errEarlyStale = errors.New("db: postgres: the early read is stale")

// earlyBegin is an early read sent for a batch not yet asked for.
type earlyBegin struct {
	tx    *batchTx
	need  batchNeed // what it read
	sent  time.Time
	clock int64 // the test's clock when sent (testClock)
	// Its answers, read and decoded as they come, before the batch asks
	// for them: set when done is closed.
	done chan struct{}
	now  time.Time
	v    *batchView
	due  int64
	err  error
}

// read reads e's answers from br (a goroutine of its own).
func (e *earlyBegin) read(br pgx.BatchResults) {
	e.now, e.v, e.due, e.err = readEarly(br, e.tx, e.need)
	close(e.done)
}

// covers reports whether e read everything need asks for.
func (e *earlyBegin) covers(need batchNeed) bool {
	if !need.early || len(need.keys) > 0 || need.newIDs() {
		return false
	}
	for _, id := range need.jobs {
		if _, ok := slices.BinarySearch(e.need.jobs, id); !ok {
			return false
		}
	}
	for q, n := range need.limits {
		if n > e.need.limits[q] {
			return false
		}
	}
	return true
}

func (s *Store) takeEarly() *earlyBegin {
	s.earlyMu.Lock()
	defer s.earlyMu.Unlock()
	e := s.early
	s.early = nil
	return e
}

// earlyDeadline is when the early read that waits is dropped (zero: none
// waits).
func (s *Store) earlyDeadline() time.Time {
	s.earlyMu.Lock()
	defer s.earlyMu.Unlock()
	if s.early == nil {
		return time.Time{}
	}
	return s.early.sent.Add(s.opts.EarlyWindow)
}

// useEarly returns the batch's transaction (none open yet: finishEarly
// begins it), time and view when e serves the batch of need. A nil
// transaction: it does not (a goroutine reads its answers and gives its
// connection back, so the batch does not wait for them), or an error: its
// connection failed and was given back.
//
// Reads that serve no batch are wasted work, which a replica whose batches
// mix many callers' calls would do after every claim: after one, the
// replica skips that many claiming batches more before it reads early
// again (1, 2, 4 … 64), and reads after every one again once a read served
// (earlyBackoff).
func (s *Store) useEarly(e *earlyBegin, need batchNeed) (*batchTx, time.Time, *batchView, error) {
	if !e.covers(need) || time.Since(e.sent) > s.opts.EarlyWindow || s.testClock && s.opts.Now().UnixNano() != e.clock {
		s.earlyMissed()
		go s.closeEarly(e)
		return nil, time.Time{}, nil, nil
	}
	<-e.done
	now, v, due, err := e.now, e.v, e.due, e.err
	if err != nil {
		s.earlyMissed()
		s.endBatch(e.tx)
		return nil, time.Time{}, nil, err
	}
	if e.tx.head == nil || len(need.claimQueues) > 0 && due != 0 && due <= now.Add(s.opts.EarlyWindow).UnixNano() {
		s.earlyMissed()
		s.endBatch(e.tx)
		return nil, time.Time{}, nil, nil
	}
	s.earlyHits.Add(1)
	s.earlyMu.Lock()
	s.earlyBackoff.served()
	s.earlyMu.Unlock()
	tx := &batchTx{conn: e.tx.conn, trips: &s.trips, stmts: &s.stmts, need: need, head: e.tx.head, early: true}
	return tx, now, v, nil
}

// earlyMissed counts a read that served no batch and backs off.
func (s *Store) earlyMissed() {
	s.earlyMisses.Add(1)
	s.earlyMu.Lock()
	defer s.earlyMu.Unlock()
	s.earlyBackoff.missed(maxEarlyBackoff)
}

// maxEarlyBackoff bounds how many claiming batches a replica skips
// between two early reads that serve nothing.
const maxEarlyBackoff = 64

// skipBackoff skips attempts after ones that served little: 1, 2, 4 … up
// to a limit after each that did not serve, none once one did (early
// reads, gathering waits).
type skipBackoff struct{ n, skip int }

// skipping reports whether to skip this attempt, and counts it if so.
func (b *skipBackoff) skipping() bool {
	if b.skip > 0 {
		b.skip--
		return true
	}
	return false
}

// missed notes an attempt that did not serve: skip twice as many next.
func (b *skipBackoff) missed(limit int) {
	b.n = min(max(1, 2*b.n), limit)
	b.skip = b.n
}

// served notes an attempt that served: skip none.
func (b *skipBackoff) served() { b.n, b.skip = 0, 0 }

// closeEarly waits for e's answers and gives its connection back.
func (s *Store) closeEarly(e *earlyBegin) {
	<-e.done
	s.endBatch(e.tx)
}

// sendEarly sends the early read of need on tx's connection.
func (s *Store) sendEarly(ctx context.Context, tx *batchTx, need batchNeed) pgx.BatchResults {
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY`)
	b.Queue(`SELECT set_config('fenceq.now', (`+nowSQL+`)::text, true)::bigint`, s.clockArg())
	b.Queue(earlyRowsSQL, need.jobs)
	b.Queue(earlyCandidatesSQL, candidateArgs(need.claimQueues, need.limits, nil, need.jobs)...)
	b.Queue(earlyHeadSQL)
	b.Queue(`SELECT queue FROM fenceq_paused`)
	b.Queue(earlyDueSQL, need.claimQueues)
	b.Queue(`COMMIT`)
	tx.tripOf(b.Len())
	return tx.conn.SendBatch(ctx, b)
}

// readEarly reads sendEarly's answers into a view, with each row's
// version, and the head into tx.
func readEarly(br pgx.BatchResults, tx *batchTx, need batchNeed) (time.Time, *batchView, int64, error) {
	v := newBatchView()
	v.versions = map[uint64]string{}
	var ns int64
	var due *int64
	scan := func() ([]*db.JobRecord, error) {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []*db.JobRecord
		for rows.Next() {
			var x string
			r, err := scanJob(rows, &x)
			if err != nil {
				return nil, err
			}
			v.versions[r.ID] = x
			out = append(out, r)
		}
		return out, rows.Err()
	}
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&ns)
	}
	if err == nil {
		var recs []*db.JobRecord
		if recs, err = scan(); err == nil {
			for _, id := range need.jobs {
				v.asked[uint64(id)] = true
			}
			for _, r := range recs {
				v.rows[r.ID] = r
			}
		}
	}
	if err == nil {
		var recs []*db.JobRecord
		if recs, err = scan(); err == nil {
			v.fill(need.claimQueues, recs, need.limits)
		}
	}
	if err == nil {
		tx.head, err = readHeadAndPaused(br, v)
	}
	if err == nil {
		err = br.QueryRow().Scan(&due)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return time.Time{}, nil, 0, err
	}
	v.undo = nil
	var dueBy int64
	if due != nil {
		dueBy = *due
	}
	return time.Unix(0, ns).UTC(), v, dueBy, nil
}

// finishEarly is finishBatch for a batch decided against an early read:
// one round trip that begins its transaction, checks what it decided on
// while it writes it (earlyRowsCheckSQL, updateJobsCheckedSQL,
// earlyHeadLockSQL) and commits; or, for a batch that writes nothing,
// checks the same without locks.
func (s *Store) finishEarly(w *writer) (committed bool, err error) {
	tx := w.tx.(*batchTx)
	tx.early = false
	head := tx.head
	writes := len(w.events) > 0 || hasCounts(w.counts) || len(w.notify) > 0 || len(w.v.dirty) > 0
	// The rows it decided on and does not write (the written ones are
	// checked by their UPDATE), and the ids it did not find.
	ids := make([]int64, 0, len(w.v.rows)+len(w.v.asked))
	for id := range w.v.asked {
		if !w.v.dirty[id] {
			ids = append(ids, int64(id))
		}
	}
	for id := range w.v.rows {
		if !w.v.asked[id] && !w.v.dirty[id] {
			ids = append(ids, int64(id))
		}
	}
	slices.Sort(ids)
	versions := make([]string, len(ids))
	present := 0
	for i, id := range ids {
		if x, ok := w.v.versions[uint64(id)]; ok {
			versions[i] = x
			present++
		}
	}
	headArgs := []any{int64(head.head.seq), head.minWriter, head.version}
	b := &pgx.Batch{}
	if !writes {
		b.Queue(earlyRowsCheckSQL, ids, versions, present)
		b.Queue(earlyHeadCheckSQL, headArgs...)
		tx.tripOf(b.Len())
		br := tx.conn.SendBatch(w.ctx, b)
		_, err = br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err == nil, earlyError(err)
	}
	if err := s.gate.saw(head.version, head.minWriter); err != nil {
		return false, err
	}
	b.Queue(`BEGIN`)
	b.Queue(earlyRowsCheckSQL, ids, versions, present)
	// The rows first (by id, in the UPDATE), then the head: the lock order
	// of every batch.
	_, inserts, err := w.v.flushJobs(b)
	if err != nil {
		return false, err
	}
	if inserts > 0 {
		return false, errEarlyStale // never: an early read serves no enqueue
	}
	b.Queue(earlyHeadLockSQL, headArgs...)
	checks := b.Len()
	s.queueCounts(b, w)
	if err := s.queueChain(b, w, head.head); err != nil {
		return false, err
	}
	b.Queue(`COMMIT`)
	tx.tripOf(b.Len())
	tx.locked = time.Now()
	defer s.countHold(tx)
	br := tx.conn.SendBatch(w.ctx, b)
	for i := 0; i < checks && err == nil; i++ {
		_, err = br.Exec()
	}
	if err != nil {
		_ = br.Close()
		return false, earlyError(err)
	}
	return readCommit(tx, br, checks, b.Len(), nil)
}

// earlyError is errEarlyStale for a check that failed.
func earlyError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22012" {
		return errEarlyStale
	}
	return err
}

// dropEarly drops the early read that waits, if one does.
func (s *Store) dropEarly() {
	if e := s.takeEarly(); e != nil {
		s.closeEarly(e)
	}
}

// beginEarly sends the next batch's early read after tx, a batch that
// committed with the audit head, moving it by events links: when the batch
// is one an early read serves (its claims took jobs) and no other replica
// committed since this replica's previous batch.
func (s *Store) beginEarly(tx *batchTx, v *batchView, events int) {
	s.earlyMu.Lock()
	defer s.earlyMu.Unlock()
	if tx.head == nil {
		s.lastSeq = 0
		return
	}
	alone := tx.head.head.seq == s.lastSeq
	s.lastSeq = tx.head.head.seq + uint64(events)
	if s.opts.NoEarlyRead || !alone || !tx.need.early || len(tx.need.claimQueues) == 0 || s.early != nil {
		return
	}
	if s.earlyBackoff.skipping() {
		return
	}
	var ids []int64
	for id := range v.dirty {
		if r := v.rows[id]; r != nil && r.State == db.StateClaimed {
			ids = append(ids, int64(id))
		}
	}
	if len(ids) == 0 {
		return // the claims found nothing: the next call waits for jobs
	}
	// The rows and claims of this batch and of the previous claiming
	// batch: a worker's call may complete jobs of two of its calls before
	// (its handlers did not all end together), and two workers' calls
	// alternate.
	this := batchNeed{jobs: ids, claimQueues: slices.Clone(tx.need.claimQueues), limits: maps.Clone(tx.need.limits), early: true}
	need := batchNeed{jobs: append(slices.Clone(ids), s.earlyPrev.jobs...), claimQueues: slices.Clone(this.claimQueues),
		limits: maps.Clone(this.limits), early: true}
	for _, q := range s.earlyPrev.claimQueues {
		if _, ok := need.limits[q]; !ok {
			need.claimQueues = append(need.claimQueues, q)
		}
		need.limits[q] = max(need.limits[q], s.earlyPrev.limits[q])
	}
	s.earlyPrev = this
	slices.Sort(need.jobs)
	need.jobs = slices.Compact(need.jobs)
	// A connection the pool has idle, or one more it may open (once): never
	// wait for one that the replica's other work holds.
	if st := s.pool.Stat(); st.IdleConns() == 0 && st.TotalConns() >= st.MaxConns() {
		return
	}
	ctx, cancel := context.WithTimeout(s.stopped, s.opts.ConnectTimeout)
	conn, err := s.pool.Acquire(ctx)
	cancel()
	if err != nil {
		return
	}
	e := &earlyBegin{tx: &batchTx{conn: conn, trips: &s.earlyTrips, stmts: &s.earlyStmts}, need: need, sent: time.Now(), done: make(chan struct{})}
	if s.testClock {
		e.clock = s.opts.Now().UnixNano()
	}
	go e.read(s.sendEarly(s.stopped, e.tx, need))
	s.early = e
}
