package api

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/fenceq/fenceq/lease"
	"github.com/labstack/echo/v4"
)

// Role is what a principal may do.
type Role string

// The roles. admin may call every endpoint.
const (
	RoleProducer Role = "producer"
	RoleWorker   Role = "worker"
	RoleAdmin    Role = "admin"
)

var allRoles = []Role{RoleProducer, RoleWorker, RoleAdmin}

// Principal is an authenticated caller.
type Principal struct {
	Name      string
	Roles     []Role
	tokenHash [sha256.Size]byte
}

// Has reports whether p has role r (admin has every role).
func (p Principal) Has(r Role) bool {
	return slices.Contains(p.Roles, r) || slices.Contains(p.Roles, RoleAdmin)
}

// Principals is the content of an auth file.
type Principals struct {
	list []Principal
}

// ParsePrincipals reads an auth file: one principal a line,
//
//	name roles sha256-hex-of-token
//
// with roles a comma-separated subset of producer, worker, admin. Blank lines
// and lines starting with '#' are ignored. Errors name the line.
func ParsePrincipals(r io.Reader) (*Principals, error) {
	ps := &Principals{}
	seenName := map[string]int{}
	seenHash := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("auth file line %d: want \"name roles sha256\", got %d fields", n, len(fields))
		}
		p := Principal{Name: fields[0]}
		if err := lease.ValidatePrincipal(p.Name); err != nil {
			return nil, fmt.Errorf("auth file line %d: %v", n, err)
		}
		if prev, ok := seenName[p.Name]; ok {
			return nil, fmt.Errorf("auth file line %d: principal %q is already defined on line %d", n, p.Name, prev)
		}
		for _, r := range strings.Split(fields[1], ",") {
			role := Role(r)
			if !slices.Contains(allRoles, role) {
				return nil, fmt.Errorf("auth file line %d: unknown role %q (want producer, worker or admin)", n, r)
			}
			if !slices.Contains(p.Roles, role) {
				p.Roles = append(p.Roles, role)
			}
		}
		h, err := hex.DecodeString(fields[2])
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("auth file line %d: the third field must be 64 hex digits (SHA-256 of the token)", n)
		}
		copy(p.tokenHash[:], h)
		if prev, ok := seenHash[p.tokenHash]; ok {
			return nil, fmt.Errorf("auth file line %d: same token hash as line %d", n, prev)
		}
		seenName[p.Name], seenHash[p.tokenHash] = n, n
		ps.list = append(ps.list, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	if len(ps.list) == 0 {
		return nil, fmt.Errorf("auth file: no principals defined")
	}
	return ps, nil
}

// Authenticate finds the principal whose token hashes to the bearer token's
// hash. Every entry is compared, in constant time, so the time taken does
// not depend on which principal (if any) matched.
func (ps *Principals) Authenticate(token string) (Principal, bool) {
	h := sha256.Sum256([]byte(token))
	var found Principal
	ok := 0
	for _, p := range ps.list {
		eq := subtle.ConstantTimeCompare(h[:], p.tokenHash[:])
		if eq == 1 {
			found = p
		}
		ok |= eq
	}
	return found, ok == 1
}

// NewToken returns a fresh random bearer token (256 bits, URL-safe base64)
// and the auth-file line that grants it to name with roles.
func NewToken(name string, roles []Role) (token, line string, err error) {
	if err := lease.ValidatePrincipal(name); err != nil {
		return "", "", err
	}
	if len(roles) == 0 {
		return "", "", fmt.Errorf("at least one role is required (producer, worker, admin)")
	}
	var names []string
	for _, r := range roles {
		if !slices.Contains(allRoles, r) {
			return "", "", fmt.Errorf("unknown role %q (want producer, worker or admin)", r)
		}
		names = append(names, string(r))
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	token = "fq_" + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(token))
	return token, fmt.Sprintf("%s %s %s", name, strings.Join(names, ","), hex.EncodeToString(h[:])), nil
}

// routeRoles says which role each route needs. Routes not listed need no
// authentication (health, readiness, the status page and its assets).
// admin passes every check.
var routeRoles = map[string]Role{
	"POST /v1/jobs":                 RoleProducer,
	"GET /v1/jobs":                  RoleProducer,
	"GET /v1/jobs/:id":              RoleProducer,
	"GET /v1/queues":                RoleProducer,
	"POST /v1/queues/:queue/pause":  RoleAdmin,
	"POST /v1/queues/:queue/resume": RoleAdmin,
	"POST /v1/jobs/:id/cancel":      RoleAdmin,
	"POST /v1/jobs/:id/retry":       RoleAdmin,
	"POST /v1/claim":                RoleWorker,
	"POST /v1/jobs/:id/heartbeat":   RoleWorker,
	"POST /v1/jobs/:id/complete":    RoleWorker,
	"POST /v1/jobs/:id/fail":        RoleWorker,
	"POST /v1/jobs/heartbeat":       RoleWorker,
	"POST /v1/jobs/complete":        RoleWorker,
	"POST /v1/jobs/fail":            RoleWorker,
	"GET /v1/audit":                 RoleAdmin,
	"GET /v1/audit/verify":          RoleAdmin,
	"GET /v1/stats":                 RoleProducer,
	"GET /v1/backup":                RoleAdmin,
	"POST /v1/leases/*":             RoleWorker,
	"GET /v1/leases":                RoleWorker,
	"GET /v1/leases/*":              RoleWorker,
	"POST /v1/jobs/:id/check":       anyRole,
	// The status page (status.go): GET /v1/status filters its parts by
	// the caller's roles, by this table.
	"GET /v1/status":            anyRole,
	"GET /v1/whoami":            anyRole,
	"GET /v1/jobs/:id/history":  RoleProducer,
	"GET /v1/jobs/:id/refusals": RoleProducer,
	// Audit retention (audit_archive.go).
	"GET /v1/audit/archive":         RoleAdmin,
	"POST /v1/audit/archive/remove": RoleAdmin,
	// Periodic jobs (schedules.go): reading is a producer's, changing one
	// is configuration (a schedule enqueues for ever on its own, as a
	// queue pause stops claims): admin.
	"GET /v1/schedules":                RoleProducer,
	"GET /v1/schedules/:name":          RoleProducer,
	"PUT /v1/schedules/:name":          RoleAdmin,
	"DELETE /v1/schedules/:name":       RoleAdmin,
	"POST /v1/schedules/:name/pause":   RoleAdmin,
	"POST /v1/schedules/:name/resume":  RoleAdmin,
	"POST /v1/schedules/:name/trigger": RoleAdmin,
}

// anyRole: any authenticated principal.
const anyRole Role = "any"

// authenticate is the middleware used with an auth file.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		method := c.Request().Method
		if method == http.MethodHead {
			method = http.MethodGet // HEAD is GET without the body (headAsGet): the same role
		}
		need, guarded := routeRoles[method+" "+c.Path()]
		if c.Request().Method == http.MethodPost && c.Path() == "/v1/leases/*" && strings.HasSuffix(c.Request().URL.Path, "/check") {
			// A resource guarded by a lease checks tokens without being a
			// worker. Only the POST is the check: GET of a lease whose name
			// ends in "/check" reads the lease and needs the worker role.
			need = anyRole
		}
		if !guarded && !strings.HasPrefix(c.Path(), "/v1/") {
			return next(c)
		}
		if !guarded {
			// An unlisted /v1 route is admin-only until someone decides otherwise.
			need = RoleAdmin
		}
		p, apiErr := s.authorize(c.Request().Header.Get("Authorization"), need)
		if p.Name != "" {
			c.Set(principalKey, p.Name)
			c.Set(rolesKey, p)
		}
		if apiErr != nil {
			return apiErr
		}
		return next(c)
	}
}

// authorize is the one authentication and role check of both front ends
// (the JSON routes above, the protobuf RPCs in rpc.go): the principal of
// an "Authorization: Bearer <token>" header, refused unauthenticated
// without a known token and permission_denied without role need. The
// principal is returned when the token is known, even with the refusal.
func (s *Server) authorize(authorization string, need Role) (Principal, *Error) {
	token, ok := bearerToken(authorization)
	if !ok {
		return Principal{}, &Error{http.StatusUnauthorized, "unauthenticated", "missing bearer token: send Authorization: Bearer <token>"}
	}
	p, ok := s.cfg.Principals.Authenticate(token)
	if !ok {
		return Principal{}, &Error{http.StatusUnauthorized, "unauthenticated", "unknown bearer token"}
	}
	if need != anyRole && !p.Has(need) {
		return p, &Error{http.StatusForbidden, "permission_denied",
			fmt.Sprintf("principal %q lacks the %s role this endpoint needs", p.Name, need)}
	}
	return p, nil
}

const rolesKey = "fenceq.roles"

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header. The scheme name is case-insensitive (RFC 9110 §11.1), so
// "bearer" and "BEARER" are the same scheme; the token itself is not.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
