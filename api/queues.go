package api

import (
	"context"
	"net/http"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// Queue pause and resume (admin): POST /v1/queues/{queue}/pause and
// /resume. A paused queue takes enqueues but gives no job to a claim; its
// claimed jobs can still be heartbeaten, completed and failed. Both are
// idempotent: pausing a paused queue (or resuming a running one) is 200
// with "changed": false, and writes and audits nothing.

// pauseResponse is a queue after a pause or resume.
type pauseResponse struct {
	Queue    string     `json:"queue"`
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	PausedBy string     `json:"paused_by,omitempty"`
	// Changed is false when the queue already was as asked.
	Changed bool `json:"changed"`
}

func (s *Server) pauseQueue(c echo.Context) error  { return s.setPaused(c, true) }
func (s *Server) resumeQueue(c echo.Context) error { return s.setPaused(c, false) }

func (s *Server) setPaused(c echo.Context, paused bool) error {
	r, err := s.store.SetQueuePaused(c.Request().Context(),
		db.PauseRequest{Principal: principalOf(c), Queue: c.Param("queue"), Paused: paused})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pauseResponse{Queue: r.Queue, Paused: r.Paused, PausedAt: optTime(r.PausedAt),
		PausedBy: r.PausedBy, Changed: r.Changed})
}

// queueList is every queue with jobs or a pause, in name order: its counts
// (every state, zeros included) and its pause. A paused queue without jobs
// is listed too. Counts and pauses are two reads, so a pause made between
// them may show on one and not yet on the other.
func (s *Server) queueList(ctx context.Context) ([]queueResponse, error) {
	stats, err := s.store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	pauses, err := s.store.PausedQueues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]queueResponse, 0, len(stats)+len(pauses))
	add := func(q string, counts map[db.State]uint64) *queueResponse {
		all := map[db.State]uint64{}
		for _, st := range db.States {
			all[st] = counts[st]
		}
		out = append(out, queueResponse{Queue: q, Counts: all})
		return &out[len(out)-1]
	}
	i := 0
	for _, p := range pauses {
		for ; i < len(stats) && stats[i].Queue < p.Queue; i++ {
			add(stats[i].Queue, stats[i].Counts)
		}
		var counts map[db.State]uint64
		if i < len(stats) && stats[i].Queue == p.Queue {
			counts = stats[i].Counts
			i++
		}
		q := add(p.Queue, counts)
		q.Paused, q.PausedAt, q.PausedBy = true, optTime(p.PausedAt), p.PausedBy
	}
	for ; i < len(stats); i++ {
		add(stats[i].Queue, stats[i].Counts)
	}
	return out, nil
}

// withLatency fills each queue's latency (the status page's queues; GET
// /v1/queues leaves it out, so that its answer changes only with the
// queues themselves).
func (s *Server) withLatency(ctx context.Context, out []queueResponse) ([]queueResponse, error) {
	waiting, err := s.store.QueueWaiting(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	for i := range out {
		out[i].LatencyMS = new(int64)
	}
	for j, k := 0, 0; j < len(out) && k < len(waiting); {
		switch q, w := &out[j], waiting[k]; {
		case q.Queue == w.Queue:
			*q.LatencyMS, q.OldestJob, q.OldestAvailableAt = latency(now, w.Since).Milliseconds(), w.Job, optTime(w.Since)
			j, k = j+1, k+1
		case q.Queue < w.Queue:
			j++
		default:
			k++
		}
	}
	return out, nil
}

// latency is how long a job available since since has waited at now (0
// for a clock behind the store's).
func latency(now, since time.Time) time.Duration { return max(now.Sub(since), 0) }
