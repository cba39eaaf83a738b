package postgres

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

func getLease(ctx context.Context, q querier, name string, lock bool) (*db.LeaseRecord, error) {
	sql := `SELECT holder, token, expires_at, acquired_at, updated_at FROM fenceq_leases WHERE name = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var r db.LeaseRecord
	var token int64
	var holder []byte
	err := q.QueryRow(ctx, sql, name).Scan(&holder, &token, &r.ExpiresAt, &r.AcquiredAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.Token, r.Holder = uint64(token), string(holder)
	return &r, nil
}

func putLease(w *writer, name string, r *db.LeaseRecord) error {
	_, err := w.tx.Exec(w.ctx, `INSERT INTO fenceq_leases (name, holder, token, expires_at, acquired_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = excluded.token,
		expires_at = excluded.expires_at, acquired_at = excluded.acquired_at, updated_at = excluded.updated_at`,
		name, []byte(r.Holder), int64(r.Token), r.ExpiresAt, r.AcquiredAt, r.UpdatedAt)
	return err
}

// AcquireLease gives the named lease to the caller with the name's next
// token (db.AcquireLease), or CodeConflict while another holds it; with
// Wait it first waits for a release (on any replica) or the expiry. The
// row is locked while the token is chosen, so tokens only grow across
// replicas.
func (s *Store) AcquireLease(ctx context.Context, req db.AcquireLeaseRequest) (db.Lease, error) {
	holder, ttl, err := s.opts.ValidateAcquire(req)
	if err != nil {
		return db.Lease{}, err
	}
	return s.waits.Acquire(ctx, req.Name, req.Wait, func(ctx context.Context) (db.Lease, bool, time.Duration, error) {
		got, cur, err := s.acquireLease(ctx, req, holder, ttl)
		if err != nil && cur != nil {
			return got, true, time.Duration(cur.rec.ExpiresAt - cur.now), err
		}
		return got, false, 0, err
	})
}

// heldBy is a lease another holds, as an acquire found it.
type heldBy struct {
	rec db.LeaseRecord
	now int64
}

func (s *Store) acquireLease(ctx context.Context, req db.AcquireLeaseRequest, holder string, ttl time.Duration) (db.Lease, *heldBy, error) {
	var out db.Lease
	var held *heldBy
	err := s.updatePlan(ctx, opPlan{keys: []string{leaseKey(req.Name)}}, func(w *writer) error {
		held = nil
		old, err := getLease(w.ctx, w.tx, req.Name, true)
		if err != nil {
			return err
		}
		next, ev, err := db.AcquireLease(old, req, holder, ttl, w.now)
		if err != nil {
			if old != nil && old.Named().Held(w.now) {
				held = &heldBy{rec: *old, now: w.now.UnixNano()}
			}
			return err
		}
		if err := putLease(w, req.Name, &next); err != nil {
			return err
		}
		w.audit(ev)
		out = next.Lease(req.Name, w.now)
		return nil
	})
	return out, held, err
}

// RenewLease extends the caller's unexpired lease (db.RenewLease).
func (s *Store) RenewLease(ctx context.Context, req db.RenewLeaseRequest) (db.Lease, error) {
	holder, ttl, err := s.opts.ValidateRenew(req)
	if err != nil {
		return db.Lease{}, err
	}
	var out db.Lease
	err = s.updatePlan(ctx, opPlan{keys: []string{leaseKey(req.Name)}}, func(w *writer) error {
		old, err := getLease(w.ctx, w.tx, req.Name, true)
		if err != nil {
			return err
		}
		if old == nil {
			return db.LeaseNotFound(req.Name)
		}
		next, ev, err := db.RenewLease(old, req, holder, ttl, w.now)
		if err != nil {
			return err
		}
		if err := putLease(w, req.Name, &next); err != nil {
			return err
		}
		w.audit(ev)
		out = next.Lease(req.Name, w.now)
		return nil
	})
	return out, err
}

// ReleaseLease frees the caller's lease (db.ReleaseLease); acquires
// waiting on any replica are woken after the commit.
func (s *Store) ReleaseLease(ctx context.Context, req db.ReleaseLeaseRequest) (db.Lease, error) {
	holder, err := s.opts.ValidateRelease(req)
	if err != nil {
		return db.Lease{}, err
	}
	var out db.Lease
	err = s.updatePlan(ctx, opPlan{keys: []string{leaseKey(req.Name)}}, func(w *writer) error {
		old, err := getLease(w.ctx, w.tx, req.Name, true)
		if err != nil {
			return err
		}
		if old == nil {
			return db.LeaseNotFound(req.Name)
		}
		next, ev, err := db.ReleaseLease(old, req, holder, w.now)
		if err != nil {
			return err
		}
		if err := putLease(w, req.Name, &next); err != nil {
			return err
		}
		w.audit(ev)
		w.notify = append(w.notify, notifyReleased(req.Name))
		out = next.Lease(req.Name, w.now)
		return nil
	})
	return out, err
}

// leaseNow reads a lease and the database's clock in one statement.
func (s *Store) leaseNow(ctx context.Context, name string) (*db.LeaseRecord, time.Time, error) {
	var r db.LeaseRecord
	var token, now int64
	var holder []byte
	err := s.pool.QueryRow(ctx, `SELECT holder, token, expires_at, acquired_at, updated_at, `+nowSQL+` FROM fenceq_leases WHERE name = $2`,
		s.clockArg(), name).Scan(&holder, &token, &r.ExpiresAt, &r.AcquiredAt, &r.UpdatedAt, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, db.LeaseNotFound(name)
	}
	if err != nil {
		return nil, time.Time{}, s.readError(err)
	}
	r.Token, r.Holder = uint64(token), string(holder)
	return &r, time.Unix(0, now).UTC(), nil
}

// CheckLease answers whether token is the lease's current, unexpired
// token by the database's clock (db.CheckLeaseToken).
func (s *Store) CheckLease(ctx context.Context, name string, token uint64) (db.Lease, error) {
	if err := db.ValidateLeaseName(name); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseToken(token); err != nil {
		return db.Lease{}, err
	}
	rec, now, err := s.leaseNow(ctx, name)
	if err != nil {
		return db.Lease{}, err
	}
	if err := db.CheckLeaseToken(rec, name, token, now); err != nil {
		return db.Lease{}, err
	}
	return rec.Lease(name, now), nil
}

// GetLease returns the lease, or CodeNotFound.
func (s *Store) GetLease(ctx context.Context, name string) (db.Lease, error) {
	if err := db.ValidateLeaseName(name); err != nil {
		return db.Lease{}, err
	}
	rec, now, err := s.leaseNow(ctx, name)
	if err != nil {
		return db.Lease{}, err
	}
	return rec.Lease(name, now), nil
}

// ListLeases pages through leases in name order (bytewise), released and
// expired ones included.
func (s *Store) ListLeases(ctx context.Context, req db.ListLeasesRequest) (db.LeasePage, error) {
	var err error
	if req.Limit, err = db.ListLimit(req.Limit); err != nil {
		return db.LeasePage{}, err
	}
	page := db.LeasePage{Leases: []db.Lease{}}
	after := req.After
	if after <= req.Prefix {
		after = ""
	}
	// Names sort bytewise (collation "C"), as bbolt's keys. A prefix or
	// cursor that is no name — not UTF-8, or with a NUL, which a text
	// parameter cannot carry — is compared as bytes.
	where, prefix, cursor := `name >= $2 AND starts_with(name, $2) AND name > $3`, any(req.Prefix), any(after)
	if !textParam(req.Prefix) || !textParam(after) {
		where = `convert_to(name, 'UTF8') >= $2 AND substring(convert_to(name, 'UTF8') FROM 1 FOR length($2)) = $2 AND convert_to(name, 'UTF8') > $3`
		prefix, cursor = []byte(req.Prefix), []byte(after)
	}
	rows, err := s.pool.Query(ctx, `SELECT name, holder, token, expires_at, acquired_at, updated_at, `+nowSQL+` FROM fenceq_leases
		WHERE `+where+` ORDER BY name LIMIT $4`, s.clockArg(), prefix, cursor, req.Limit+1)
	if err != nil {
		return db.LeasePage{}, s.readError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var r db.LeaseRecord
		var token, now int64
		var holder []byte
		if err := rows.Scan(&name, &holder, &token, &r.ExpiresAt, &r.AcquiredAt, &r.UpdatedAt, &now); err != nil {
			return db.LeasePage{}, s.readError(err)
		}
		if len(page.Leases) == req.Limit {
			page.Next = page.Leases[len(page.Leases)-1].Name
			break
		}
		r.Token, r.Holder = uint64(token), string(holder)
		page.Leases = append(page.Leases, r.Lease(name, time.Unix(0, now).UTC()))
	}
	return page, s.readError(rows.Err())
}

// textParam reports whether a client's string can be a text parameter:
// valid UTF-8 without a NUL.
func textParam(v string) bool { return utf8.ValidString(v) && !strings.ContainsRune(v, 0) }
