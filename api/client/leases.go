package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Lease is a named lease. FencingToken is the last token issued for the
// name: the current one while Held.
type Lease struct {
	Name string `json:"name"`
	// Holder is principal|holder of the current holder, or of the last one
	// of an expired lease; empty after a release.
	Holder       string    `json:"holder,omitempty"`
	FencingToken uint64    `json:"fencing_token"`
	Held         bool      `json:"held"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
	AcquiredAt   time.Time `json:"acquired_at,omitzero"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// leasePath is /v1/leases/{name}[/{action}] with the name percent-encoded
// as one path segment, so that names with slashes, spaces or '%' survive
// proxies that merge or decode slashes.
func leasePath(name, action string) (string, error) {
	if name == "" {
		return "", errors.New("fenceq: lease name is empty")
	}
	p := "/v1/leases/" + url.PathEscape(name)
	if action != "" {
		p += "/" + action
	}
	return p, nil
}

func (c *Client) leaseCall(ctx context.Context, method, name, action string, body, out any) error {
	p, err := leasePath(name, action)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, request{method: method, escapedPath: p, body: body}, out)
	return err
}

// AcquireLeaseParams asks for a named lease.
type AcquireLeaseParams struct {
	Holder string        // the holder label; the holder is principal|Holder
	TTL    time.Duration // 0: the server's default
	// Wait, when the lease is held, waits up to this long for it to be
	// released or to expire (at most 60s).
	Wait time.Duration
}

// AcquireLease takes the lease name when it is free or expired and returns
// it with a new fencing token (the previous one + 1, for ever). A held,
// unexpired lease is CodeFailedPrecondition, even for the same holder.
func (c *Client) AcquireLease(ctx context.Context, name string, p AcquireLeaseParams) (Lease, error) {
	body := struct {
		Holder string `json:"holder"`
		TTLMs  int64  `json:"ttl_ms,omitempty"`
		WaitMs int64  `json:"wait_ms,omitempty"`
	}{p.Holder, millis(p.TTL), millis(p.Wait)}
	var l Lease
	err := c.leaseCall(ctx, http.MethodPost, name, "acquire", body, &l)
	return l, err
}

// RenewLeaseParams extends a held lease.
type RenewLeaseParams struct {
	Holder       string
	FencingToken uint64
	TTL          time.Duration // 0: the server's default
}

// RenewLease extends the caller's lease. A stale or wrong token, another
// holder, a released or an expired lease is CodeFailedPrecondition and
// changes nothing.
func (c *Client) RenewLease(ctx context.Context, name string, p RenewLeaseParams) (Lease, error) {
	body := struct {
		Holder       string `json:"holder"`
		FencingToken uint64 `json:"fencing_token"`
		TTLMs        int64  `json:"ttl_ms,omitempty"`
	}{p.Holder, p.FencingToken, millis(p.TTL)}
	var l Lease
	err := c.leaseCall(ctx, http.MethodPost, name, "renew", body, &l)
	return l, err
}

// ReleaseLease gives the caller's lease back. Errors as RenewLease.
func (c *Client) ReleaseLease(ctx context.Context, name, holder string, token uint64) (Lease, error) {
	body := struct {
		Holder       string `json:"holder"`
		FencingToken uint64 `json:"fencing_token"`
	}{holder, token}
	var l Lease
	err := c.leaseCall(ctx, http.MethodPost, name, "release", body, &l)
	return l, err
}

// LeaseCheck is the answer of a current lease token.
type LeaseCheck struct {
	Name         string    `json:"name"`
	FencingToken uint64    `json:"fencing_token"`
	Current      bool      `json:"current"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
}

// CheckLease asks whether token is the lease's current, unexpired token.
// Any other token is CodeFailedPrecondition; a name never acquired is
// CodeNotFound.
func (c *Client) CheckLease(ctx context.Context, name string, token uint64) (LeaseCheck, error) {
	body := struct {
		FencingToken uint64 `json:"fencing_token"`
	}{token}
	var out LeaseCheck
	err := c.leaseCall(ctx, http.MethodPost, name, "check", body, &out)
	return out, err
}

// GetLease returns the lease name. Errors: CodeNotFound.
func (c *Client) GetLease(ctx context.Context, name string) (Lease, error) {
	var l Lease
	err := c.leaseCall(ctx, http.MethodGet, name, "", nil, &l)
	return l, err
}

// ListLeasesParams filters and pages ListLeases.
type ListLeasesParams struct {
	Prefix string
	After  string // the Next of the previous page
	Limit  int
}

// LeasePage is one page of leases in name order. Next, when not empty, is
// the After of the next page.
type LeasePage struct {
	Leases []Lease `json:"leases"`
	Next   string  `json:"next,omitempty"`
}

// ListLeases returns leases in name order (GET /v1/leases).
func (c *Client) ListLeases(ctx context.Context, p ListLeasesParams) (LeasePage, error) {
	q := url.Values{}
	if p.Prefix != "" {
		q.Set("prefix", p.Prefix)
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page LeasePage
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/leases", query: q}, &page)
	return page, err
}
