package postgres

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// Source is a store whose whole state a copy reads: the bbolt engine.
type Source interface {
	ExportJobs(ctx context.Context, after uint64, limit int) ([]db.JobRecord, error)
	JobSequence() (uint64, error)
	ListLeases(ctx context.Context, req db.ListLeasesRequest) (db.LeasePage, error)
	PausedQueues(ctx context.Context) ([]db.QueuePause, error)
	ListAudit(ctx context.Context, after uint64, limit int) ([]db.AuditRecord, error)
	AuditHead(ctx context.Context) (db.AuditHead, error)
	ListRefusedCalls(ctx context.Context, req db.RefusedCallsRequest) ([]db.RefusedCall, error)
	ListWorkers(ctx context.Context, req db.WorkersRequest) ([]db.Worker, error)
	ExportSchedules(ctx context.Context, after string, limit int) ([]db.ScheduleExport, error)
}

// CopyReport is what Copy moved.
type CopyReport struct {
	Jobs, Leases, Pauses, AuditLinks uint64
	RefusedCalls, Workers            uint64
	Schedules, ScheduleTicks         uint64
	Audit                            db.AuditReport // the chain verified on the target
}

// copying is one copy in progress: its source, the target's transaction
// and what it moved.
type copying struct {
	ctx     context.Context
	src     Source
	srcHead db.AuditHead
	tx      pgx.Tx
	w       *writer
	rep     *CopyReport
}

// copySteps carry each stored kind (db.StoredKinds), in that order. A
// kind without a step fails the copy, and TestCopy_CarriesEveryStoredKind.
var copySteps = map[db.StoredKind]func(c *copying) error{
	db.StoredJobs:        copyJobs,
	db.StoredJobSequence: copyJobSequence,
	db.StoredLeases:      copyLeases,
	db.StoredPauses:      copyPauses,
	db.StoredAudit:       copyAudit,
	db.StoredRefused:     copyRefusedCalls,
	db.StoredWorkers:     copyWorkers,
	db.StoredSchedules:   copySchedules,
}

// Copy moves src's state — every db.StoredKind: jobs, the job sequence,
// named leases, paused queues, the audit chain, the status page's
// observations, schedules with their tick records — into the empty fenceq
// database at url, in one transaction: the links are stored as the same
// canonical bytes, so the chain verifies on the target as it did on the
// source. It refuses a target that holds any job, lease, pause, schedule
// or link.
// Servers must be stopped: src is read as it is, and nothing may write the
// target meanwhile.
func Copy(ctx context.Context, url string, src Source) (CopyReport, error) {
	var rep CopyReport
	s, err := Open(ctx, url, Options{})
	if err != nil {
		return rep, err
	}
	defer s.Close()
	srcHead, err := src.AuditHead(ctx)
	if err != nil {
		return rep, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var empty bool
		if err := tx.QueryRow(ctx, `SELECT seq = 0 AND NOT EXISTS (SELECT 1 FROM fenceq_jobs) AND NOT EXISTS (SELECT 1 FROM fenceq_leases)
			AND NOT EXISTS (SELECT 1 FROM fenceq_paused) AND NOT EXISTS (SELECT 1 FROM fenceq_schedules)
			FROM fenceq_audit_head WHERE id = 1 FOR UPDATE`).Scan(&empty); err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("db: postgres: copy: the target database already holds fenceq jobs, leases, pauses, schedules or audit records; copy into an empty one")
		}
		c := &copying{ctx: ctx, src: src, srcHead: srcHead, tx: tx, w: &writer{ctx: ctx, tx: tx, s: s}, rep: &rep}
		for _, kind := range db.StoredKinds {
			step, ok := copySteps[kind]
			if !ok {
				return fmt.Errorf("db: postgres: copy does not carry %s", kind)
			}
			if err := step(c); err != nil {
				return err
			}
		}
		b := &pgx.Batch{}
		s.queueCounts(b, c.w)
		if err := s.queueChain(b, c.w, auditHead{}); err != nil {
			return err
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return rep, err
	}
	if rep.Audit, err = s.VerifyAudit(ctx); err != nil {
		return rep, err
	}
	if !rep.Audit.OK || rep.Audit.HeadHash != srcHead.Hash || rep.Audit.HeadSeq != srcHead.Seq {
		return rep, fmt.Errorf("db: postgres: copy: the chain on the target does not verify as the source's (%+v, source head %d %s)", rep.Audit, srcHead.Seq, srcHead.Hash)
	}
	return rep, nil
}

func copyJobs(c *copying) error {
	for after := uint64(0); ; {
		recs, err := c.src.ExportJobs(c.ctx, after, 1000)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return nil
		}
		for i := range recs {
			if _, ok, err := insertJob(c.w, &recs[i], false); err != nil || !ok {
				return fmt.Errorf("db: postgres: copy job %d: %v (inserted %v)", recs[i].ID, err, ok)
			}
			c.w.count(recs[i].Queue, recs[i].State, 1)
			c.rep.Jobs++
		}
		after = recs[len(recs)-1].ID
	}
}

// copyJobSequence: the target's next job id follows the source's last
// one, whether or not that job is still stored.
func copyJobSequence(c *copying) error {
	seq, err := c.src.JobSequence()
	if err != nil {
		return err
	}
	_, err = c.tx.Exec(c.ctx, `SELECT setval('fenceq_job_id', $1, false)`, int64(seq)+1)
	return err
}

func copyLeases(c *copying) error {
	for after := ""; ; {
		page, err := c.src.ListLeases(c.ctx, db.ListLeasesRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			return err
		}
		for _, l := range page.Leases {
			r := db.LeaseRecord{Holder: l.Holder, Token: l.FencingToken, ExpiresAt: db.UnixNano(l.ExpiresAt),
				AcquiredAt: db.UnixNano(l.AcquiredAt), UpdatedAt: db.UnixNano(l.UpdatedAt)}
			if err := putLease(c.w, l.Name, &r); err != nil {
				return err
			}
			c.rep.Leases++
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

// copyPauses: a queue paused on the source is paused on the target, since
// the same time and by the same principal, as the chain's last pause
// record of it says.
func copyPauses(c *copying) error {
	pauses, err := c.src.PausedQueues(c.ctx)
	if err != nil {
		return err
	}
	for _, p := range pauses {
		if _, err := c.tx.Exec(c.ctx, `INSERT INTO fenceq_paused (queue, paused_at, paused_by) VALUES ($1, $2, $3)`,
			p.Queue, db.UnixNano(p.PausedAt), []byte(p.PausedBy)); err != nil {
			return err
		}
		c.rep.Pauses++
	}
	return nil
}

func copyAudit(c *copying) error {
	ctx, tx := c.ctx, c.tx
	counts := map[string]int64{}
	var last db.AuditLink
	for after := uint64(0); ; {
		recs, err := c.src.ListAudit(ctx, after, db.MaxListLimit)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			break
		}
		seqs, subjects, links := make([]int64, len(recs)), make([]string, len(recs)), make([][]byte, len(recs))
		for i, r := range recs {
			l, err := linkOf(r)
			if err != nil {
				return err
			}
			v, err := l.Seal()
			if err != nil {
				return err
			}
			if hex.EncodeToString(l.Hash) != r.Hash {
				return fmt.Errorf("db: postgres: copy: audit record %d does not hash to its stored hash on the source; run fenceq audit verify there", r.Seq)
			}
			seqs[i], subjects[i], links[i] = int64(l.Seq), l.Subject, v
			for _, k := range db.AuditCountKeys(&l) {
				counts[k]++
			}
			last = l
		}
		if _, err := tx.Exec(ctx, `INSERT INTO fenceq_audit (seq, subject, link) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[])`,
			seqs, subjects, links); err != nil {
			return err
		}
		c.rep.AuditLinks += uint64(len(recs))
		after = recs[len(recs)-1].Seq
	}
	for k, n := range counts {
		if _, err := tx.Exec(ctx, `INSERT INTO fenceq_audit_counts (key, n) VALUES ($1, $2)`, k, n); err != nil {
			return err
		}
	}
	var hash []byte
	if last.Seq > 0 {
		hash = last.Hash
	}
	cp := c.srcHead.Checkpoint
	cpHash, _ := hex.DecodeString(cp.Hash)
	if last.Seq == 0 && cp.Seq > 0 { // every stored link was archived and removed
		last.Seq, hash = cp.Seq, cpHash
	}
	lastTime := last.Time
	if last.Seq == 0 {
		lastTime = db.UnixNano(cp.Time)
	}
	_, err := tx.Exec(ctx, `UPDATE fenceq_audit_head SET seq = $1, hash = $2, last_time = $3,
		cp_seq = $4, cp_hash = $5, cp_time = $6, cp_archived_at = $7 WHERE id = 1`,
		int64(last.Seq), hash, lastTime, int64(cp.Seq), nullBytes(cpHash), db.UnixNano(cp.Time), db.UnixNano(cp.ArchivedAt))
	return err
}

// linkOf is the link a record shows, as the engines store it.
func linkOf(r db.AuditRecord) (db.AuditLink, error) {
	prev, err := hex.DecodeString(r.PrevHash)
	if err != nil {
		return db.AuditLink{}, fmt.Errorf("db: postgres: copy: audit record %d: prev_hash: %v", r.Seq, err)
	}
	return db.AuditLink{Seq: r.Seq, Time: db.UnixNano(r.Time), Principal: r.Principal, Action: r.Action,
		Subject: r.Subject, Token: r.Token, Details: r.Details, PrevHash: prev}, nil
}

// copyRefusedCalls: the refused calls the status page lists (at most
// db.MaxRefusedCalls, which one list returns whole), oldest first so that
// the target's sequence keeps their order.
func copyRefusedCalls(c *copying) error {
	calls, err := c.src.ListRefusedCalls(c.ctx, db.RefusedCallsRequest{Limit: db.MaxRefusedCalls})
	if err != nil {
		return err
	}
	for i := len(calls) - 1; i >= 0; i-- {
		r := calls[i]
		if _, err := c.tx.Exec(c.ctx, `INSERT INTO fenceq_refused (at, principal, worker, job, operation, token_sent, code, message)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			unixNano(r.At), []byte(r.Principal), []byte(r.Worker), int64(r.Job), r.Operation, int64(r.TokenSent), r.Code, []byte(r.Message)); err != nil {
			return err
		}
		c.rep.RefusedCalls++
	}
	return nil
}

// copyWorkers: the workers heard from (at most db.MaxWorkersKept), as
// they are.
func copyWorkers(c *copying) error {
	workers, err := c.src.ListWorkers(c.ctx, db.WorkersRequest{Limit: db.MaxWorkersKept})
	if err != nil {
		return err
	}
	for _, m := range workers {
		if _, err := c.tx.Exec(c.ctx, `INSERT INTO fenceq_workers (`+workerColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			[]byte(m.Principal), []byte(m.Worker), int64(m.Claims), unixNano(m.FirstSeen), unixNano(m.LastSeen),
			unixNano(m.LastClaim), unixNano(m.LastHeartbeat)); err != nil {
			return err
		}
		c.rep.Workers++
	}
	return nil
}

// copySchedules: each schedule as it is on the source (its spec, template,
// pause, next fire time, last job and counters), with its tick records,
// so that a tick decided on the source is not decided again on the target.
func copySchedules(c *copying) error {
	for after := ""; ; {
		page, err := c.src.ExportSchedules(c.ctx, after, db.MaxListLimit)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		for _, e := range page {
			if err := writeSchedule(c.w, e.Name, &e.Record); err != nil {
				return fmt.Errorf("db: postgres: copy schedule %q: %w", e.Name, err)
			}
			if len(e.Ticks) > 0 {
				ats, jobs := make([]int64, len(e.Ticks)), make([]int64, len(e.Ticks))
				for i, t := range e.Ticks {
					ats[i], jobs[i] = t.ScheduledFor, int64(t.Job)
				}
				if _, err := c.tx.Exec(c.ctx, `INSERT INTO fenceq_schedule_ticks (schedule, scheduled_for, job_id)
					SELECT $1, at, job FROM unnest($2::bigint[], $3::bigint[]) AS u(at, job)`, e.Name, ats, jobs); err != nil {
					return fmt.Errorf("db: postgres: copy the tick records of schedule %q: %w", e.Name, err)
				}
			}
			c.rep.Schedules++
			c.rep.ScheduleTicks += uint64(len(e.Ticks))
		}
		after = page[len(page)-1].Name
	}
}
