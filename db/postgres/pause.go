package postgres

import (
	"context"
	"errors"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// Queue pause and resume: a row of fenceq_paused per paused queue. Claims
// read it in their own transaction (candidatesSQL), so no claim path — a
// claim, a completion's next claim, the hand-off to a waiting long-poll —
// gives out a job of a paused queue; a resume wakes the long-polls of its
// queue on every replica.

// SetQueuePaused pauses or resumes req.Queue (db.SetPause) with its audit
// link. Refusals: CodeInvalid, CodeTooLarge.
func (s *Store) SetQueuePaused(ctx context.Context, req db.PauseRequest) (db.PauseResult, error) {
	if err := db.ValidateQueue(req.Queue); err != nil {
		return db.PauseResult{}, err
	}
	var res db.PauseResult
	err := s.updatePlan(ctx, opPlan{keys: []string{pauseKey}}, func(w *writer) error {
		var old *db.PauseRecord
		var r db.PauseRecord
		var by []byte
		err := w.tx.QueryRow(w.ctx, `SELECT paused_at, paused_by FROM fenceq_paused WHERE queue = $1`, req.Queue).Scan(&r.PausedAt, &by)
		switch {
		case err == nil:
			r.PausedBy = string(by)
			old = &r
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var paused int
		if err := w.tx.QueryRow(w.ctx, `SELECT count(*) FROM fenceq_paused`).Scan(&paused); err != nil {
			return err
		}
		next, changed, ev, err := db.SetPause(old, paused, req, w.now)
		if err != nil {
			return err
		}
		res = next.Result(req.Queue, changed)
		if !changed {
			return nil
		}
		if next != nil {
			w.paused = append(w.paused, req.Queue)
			_, err = w.tx.Exec(w.ctx, `INSERT INTO fenceq_paused (queue, paused_at, paused_by) VALUES ($1, $2, $3)`,
				req.Queue, next.PausedAt, []byte(next.PausedBy))
		} else {
			_, err = w.tx.Exec(w.ctx, `DELETE FROM fenceq_paused WHERE queue = $1`, req.Queue)
			w.notify = append(w.notify, notifyAvailable(req.Queue))
		}
		if err != nil {
			return err
		}
		// The batch's view follows (a fault after this fails the batch).
		if next != nil {
			w.v.paused[req.Queue] = true
		} else {
			delete(w.v.paused, req.Queue)
			delete(w.v.pool, req.Queue) // fetched while paused: none
		}
		w.audit(ev)
		return nil
	})
	return res, err
}

// PausedQueues lists the paused queues in name order.
func (s *Store) PausedQueues(ctx context.Context) ([]db.QueuePause, error) {
	rows, err := s.pool.Query(ctx, `SELECT queue, paused_at, paused_by FROM fenceq_paused ORDER BY queue`)
	if err != nil {
		return nil, s.readError(err)
	}
	defer rows.Close()
	out := []db.QueuePause{}
	for rows.Next() {
		var q string
		var r db.PauseRecord
		var by []byte
		if err := rows.Scan(&q, &r.PausedAt, &by); err != nil {
			return nil, s.readError(err)
		}
		r.PausedBy = string(by)
		out = append(out, r.Pause(q))
	}
	return out, s.readError(rows.Err())
}

// isPaused reports whether queue is paused in w's transaction: from the
// paused queues its batch read at its start, kept by its own pauses.
func isPaused(w *writer, queue string) (bool, error) {
	return w.v.paused[queue], nil
}
