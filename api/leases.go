package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// Lease names are paths or any other UTF-8 text, so they may contain
// slashes. The routes are wildcards, /v1/leases/* for GET and POST, and the
// handlers read the name from the escaped request path:
//
//   - GET /v1/leases/{name}: everything after /v1/leases/ is the name.
//   - POST /v1/leases/{name}/{action}: the last segment is the action,
//     everything between /v1/leases/ and it is the name.
//
// The name is percent-decoded once, so a client may send "/data/a.csv" as
// one segment, %2Fdata%2Fa.csv (what url.PathEscape and encodeURIComponent
// give, and what survives proxies that merge slashes), or with its slashes
// as they are: /v1/leases//data/a.csv/acquire. Both address the same lease.

// leasePrefix is the path every lease route starts with.
const leasePrefix = "/v1/leases/"

// leaseName returns the percent-decoded lease name of the request and, when
// withAction is set, the action in the path's last segment.
func leaseName(c echo.Context, withAction bool) (name, action string, err error) {
	rest, ok := strings.CutPrefix(c.Request().URL.EscapedPath(), leasePrefix)
	if !ok {
		return "", "", &Error{http.StatusNotFound, "not_found", "no such endpoint"}
	}
	if withAction {
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			// POST on the path of a lease (GET /v1/leases/{name}): a
			// method that path does not have.
			c.Response().Header().Set(echo.HeaderAllow, "GET, HEAD")
			return "", "", &Error{http.StatusMethodNotAllowed, "invalid_argument",
				"POST needs an action after the lease name: POST /v1/leases/{name}/acquire, renew, release or check; GET /v1/leases/{name} reads the lease"}
		}
		rest, action = rest[:i], rest[i+1:]
	}
	name, err = url.PathUnescape(rest)
	if err != nil {
		return "", "", invalidArgument("lease name %q is not validly percent-encoded", rest)
	}
	if name == "" {
		return "", "", invalidArgument("lease name is empty")
	}
	return name, action, nil
}

// leaseResponse is a lease in JSON. fencing_token is the last token issued
// for the name: the current one while held is true. holder is the current
// holder, or the last one of an expired lease; it is absent after a release.
type leaseResponse struct {
	Name         string     `json:"name"`
	Holder       string     `json:"holder,omitempty"`
	FencingToken uint64     `json:"fencing_token"`
	Held         bool       `json:"held"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	AcquiredAt   *time.Time `json:"acquired_at,omitempty"`
	UpdatedAt    time.Time  `json:"updated_at"`
}

func toLeaseResponse(l db.Lease) leaseResponse {
	return leaseResponse{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Held: l.Held,
		ExpiresAt: optTime(l.ExpiresAt), AcquiredAt: optTime(l.AcquiredAt), UpdatedAt: l.UpdatedAt}
}

// leaseAction serves POST /v1/leases/{name}/{acquire|renew|release|check}.
func (s *Server) leaseAction(c echo.Context) error {
	name, action, err := leaseName(c, true)
	if err != nil {
		return err
	}
	switch action {
	case "acquire":
		return s.acquireLease(c, name)
	case "renew":
		return s.renewLease(c, name)
	case "release":
		return s.releaseLease(c, name)
	case "check":
		return s.checkLease(c, name)
	}
	// Not an action: the path is the GET path of the lease
	// name+"/"+action (names may hold slashes), which has no POST.
	c.Response().Header().Set(echo.HeaderAllow, "GET, HEAD")
	return &Error{http.StatusMethodNotAllowed, "invalid_argument",
		"no such lease action " + strconv.Quote(action) + ": POST /v1/leases/{name}/acquire, renew, release or check"}
}

func (s *Server) acquireLease(c echo.Context, name string) error {
	var b struct {
		Holder string `json:"holder"`
		TTLMs  int64  `json:"ttl_ms"`
		WaitMs int64  `json:"wait_ms"`
	}
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	req := db.AcquireLeaseRequest{Principal: principalOf(c), Name: name, Holder: b.Holder}
	if req.TTL, err = msDuration("ttl_ms", b.TTLMs); err != nil {
		return err
	}
	if req.Wait, err = msDuration("wait_ms", b.WaitMs); err != nil {
		return err
	}
	if req.Wait <= db.MaxLeaseWait {
		// As for a claim: a wait beyond the server's limit is shortened, so
		// that the reply (with the token, if the lease was taken) can still
		// be written before the write timeout cuts the connection.
		req.Wait = min(req.Wait, s.cfg.MaxWait)
	}
	l, err := s.store.AcquireLease(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toLeaseResponse(l))
}

func (s *Server) renewLease(c echo.Context, name string) error {
	var b struct {
		Holder       string `json:"holder"`
		FencingToken uint64 `json:"fencing_token"`
		TTLMs        int64  `json:"ttl_ms"`
	}
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	req := db.RenewLeaseRequest{Principal: principalOf(c), Name: name, Holder: b.Holder, FencingToken: b.FencingToken}
	if req.TTL, err = msDuration("ttl_ms", b.TTLMs); err != nil {
		return err
	}
	l, err := s.store.RenewLease(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toLeaseResponse(l))
}

func (s *Server) releaseLease(c echo.Context, name string) error {
	var b struct {
		Holder       string `json:"holder"`
		FencingToken uint64 `json:"fencing_token"`
	}
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	l, err := s.store.ReleaseLease(c.Request().Context(), db.ReleaseLeaseRequest{Principal: principalOf(c), Name: name,
		Holder: b.Holder, FencingToken: b.FencingToken})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toLeaseResponse(l))
}

// checkBody is the body of both checks.
type checkBody struct {
	FencingToken uint64 `json:"fencing_token"`
}

// checkLease answers 200 while the token is the lease's current, unexpired
// one and 409 failed_precondition otherwise.
func (s *Server) checkLease(c echo.Context, name string) error {
	var b checkBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	l, err := s.store.CheckLease(c.Request().Context(), name, b.FencingToken)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		Name         string     `json:"name"`
		FencingToken uint64     `json:"fencing_token"`
		Current      bool       `json:"current"`
		ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	}{l.Name, l.FencingToken, true, optTime(l.ExpiresAt)})
}

// getLease serves GET /v1/leases/{name}.
func (s *Server) getLease(c echo.Context) error {
	name, _, err := leaseName(c, false)
	if err != nil {
		return err
	}
	l, err := s.store.GetLease(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toLeaseResponse(l))
}

// listLeases serves GET /v1/leases?prefix=&after=&limit=, in name order.
func (s *Server) listLeases(c echo.Context) error {
	q := c.QueryParams()
	req := db.ListLeasesRequest{Prefix: q.Get("prefix"), After: q.Get("after")}
	if err := queryInt(c, "limit", &req.Limit); err != nil {
		return err
	}
	page, err := s.store.ListLeases(c.Request().Context(), req)
	if err != nil {
		return err
	}
	out := struct {
		Leases []leaseResponse `json:"leases"`
		Next   string          `json:"next,omitempty"`
	}{Leases: make([]leaseResponse, 0, len(page.Leases)), Next: page.Next}
	for _, l := range page.Leases {
		out.Leases = append(out.Leases, toLeaseResponse(l))
	}
	return c.JSON(http.StatusOK, out)
}

// checkJob serves POST /v1/jobs/{id}/check: 200 while fencing_token is the
// job's current claim, 409 failed_precondition otherwise. The answer holds
// no payload: any principal may ask.
func (s *Server) checkJob(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var b checkBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	job, err := s.store.CheckJob(c.Request().Context(), id, b.FencingToken)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		ID             uint64     `json:"id"`
		FencingToken   uint64     `json:"fencing_token"`
		Current        bool       `json:"current"`
		LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	}{job.ID, job.Attempts, true, optTime(job.LeaseExpiresAt)})
}
