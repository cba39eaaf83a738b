package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// authFixture is a real server with an auth file of four principals.
type authFixture struct {
	url    string
	store  *bolt.Store
	tokens map[string]string // principal → bearer token
}

func newAuthFixture(t *testing.T) *authFixture {
	t.Helper()
	f := &authFixture{tokens: map[string]string{}}
	var file strings.Builder
	for _, p := range []struct {
		name  string
		roles []api.Role
	}{
		{"prod", []api.Role{api.RoleProducer}},
		{"work", []api.Role{api.RoleWorker}},
		{"boss", []api.Role{api.RoleAdmin}},
		{"work2", []api.Role{api.RoleWorker}},
	} {
		token, line, err := api.NewToken(p.name, p.roles)
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[p.name] = token
		file.WriteString(line + "\n")
	}
	ps, err := api.ParsePrincipals(strings.NewReader("# principals\n\n" + file.String()))
	if err != nil {
		t.Fatalf("ParsePrincipals() = %v", err)
	}
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	srv := httptest.NewServer(api.New(store, api.Config{Principals: ps, Logger: discardLogger()}))
	f.url = srv.URL
	t.Cleanup(func() {
		srv.Close()
		if err := store.Check(); err != nil {
			t.Errorf("Check() = %v", err)
		}
		store.Close()
	})
	return f
}

// call sends a request as principal who ("" = no token, "wrong" = an
// unknown token) and returns the status and body.
func (f *authFixture) call(t *testing.T, who, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch who {
	case "":
	case "wrong":
		req.Header.Set("Authorization", "Bearer fq_not-a-token")
	default:
		req.Header.Set("Authorization", "Bearer "+f.tokens[who])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func errCode(b []byte) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(b, &e)
	return e.Error.Code
}

func TestRoleMatrix(t *testing.T) {
	f := newAuthFixture(t)
	// A job for the id-based endpoints.
	res, err := f.store.EnqueueJob(context.Background(), db.EnqueueRequest{Principal: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	endpoints := []struct {
		method, path, body string
		role               api.Role // "" = any authenticated principal
	}{
		{"POST", "/v1/jobs", `{"queue":"q"}`, api.RoleProducer},
		{"GET", "/v1/jobs", ``, api.RoleProducer},
		{"GET", fmt.Sprintf("/v1/jobs/%d", id), ``, api.RoleProducer},
		{"GET", "/v1/queues", ``, api.RoleProducer},
		{"GET", "/v1/stats", ``, api.RoleProducer},
		{"POST", "/v1/claim", `{"worker":"w","queues":["none"]}`, api.RoleWorker},
		{"POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", id), `{"worker":"w"}`, api.RoleWorker},
		{"POST", fmt.Sprintf("/v1/jobs/%d/complete", id), `{"worker":"w"}`, api.RoleWorker},
		{"POST", fmt.Sprintf("/v1/jobs/%d/fail", id), `{"worker":"w"}`, api.RoleWorker},
		{"POST", fmt.Sprintf("/v1/jobs/%d/cancel", id+100), ``, api.RoleAdmin},
		{"POST", fmt.Sprintf("/v1/jobs/%d/retry", id+100), ``, api.RoleAdmin},
		{"GET", "/v1/audit", ``, api.RoleAdmin},
		{"GET", "/v1/audit/verify", ``, api.RoleAdmin},
		{"POST", "/v1/leases/%2Fdata%2Fa.csv/acquire", `{"holder":"h","ttl_ms":1}`, api.RoleWorker},
		{"GET", "/v1/leases", ``, api.RoleWorker},
		{"GET", "/v1/leases/%2Fdata%2Fa.csv", ``, api.RoleWorker},
		{"POST", "/v1/leases/%2Fdata%2Fa.csv/check", `{"fencing_token":1}`, ""},
		{"POST", fmt.Sprintf("/v1/jobs/%d/check", id), `{"fencing_token":1}`, ""},
	}
	roles := map[string]api.Role{"prod": api.RoleProducer, "work": api.RoleWorker, "boss": api.RoleAdmin}
	for _, ep := range endpoints {
		for _, who := range []string{"", "wrong", "prod", "work", "boss"} {
			name := fmt.Sprintf("%s %s as %q", ep.method, ep.path, who)
			status, body := f.call(t, who, ep.method, ep.path, ep.body)
			switch {
			case who == "" || who == "wrong":
				if status != http.StatusUnauthorized || errCode(body) != "unauthenticated" {
					t.Errorf("%s = %d %s, want 401 unauthenticated", name, status, body)
				}
			case ep.role == "" || roles[who] == ep.role || roles[who] == api.RoleAdmin:
				if status == http.StatusUnauthorized || status == http.StatusForbidden {
					t.Errorf("%s = %d %s, want allowed", name, status, body)
				}
			default:
				if status != http.StatusForbidden || errCode(body) != "permission_denied" {
					t.Errorf("%s = %d %s, want 403 permission_denied", name, status, body)
				}
			}
		}
	}
	// Health and readiness need no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := f.call(t, "", "GET", path, ""); status != http.StatusOK {
			t.Errorf("GET %s without a token = %d %s, want 200", path, status, body)
		}
	}
	// The role-refused cancel/retry above must not have touched the job.
	job, err := f.store.GetJob(context.Background(), id)
	if err != nil || job.State != db.StateAvailable || job.Attempts != 0 {
		t.Errorf("job after the matrix = %+v, %v; want untouched and available", job, err)
	}
}

// TestAnotherPrincipalCannotActOnAClaimEvenWithTheSameWorkerAndToken: the
// holder is principal|worker, so "work2|w1" is not "work|w1".
func TestAnotherPrincipalCannotActOnAClaimEvenWithTheSameWorkerAndToken(t *testing.T) {
	f := newAuthFixture(t)
	if status, body := f.call(t, "prod", "POST", "/v1/jobs", `{"queue":"q"}`); status != http.StatusCreated {
		t.Fatalf("enqueue = %d %s", status, body)
	}
	status, body := f.call(t, "work", "POST", "/v1/claim", `{"worker":"w1","queues":["q"]}`)
	if status != http.StatusOK {
		t.Fatalf("claim = %d %s", status, body)
	}
	var job struct {
		ID           uint64 `json:"id"`
		FencingToken uint64 `json:"fencing_token"`
		ClaimedBy    string `json:"claimed_by"`
	}
	json.Unmarshal(body, &job)
	if job.ClaimedBy != "work|w1" {
		t.Fatalf("claimed_by = %q, want work|w1", job.ClaimedBy)
	}
	_, before := f.call(t, "boss", "GET", fmt.Sprintf("/v1/jobs/%d", job.ID), "")
	fenced := fmt.Sprintf(`{"worker":"w1","fencing_token":%d,"result":1,"attestation":{"x":1}}`, job.FencingToken)
	for _, c := range []struct {
		op     string
		status int
		code   string
	}{
		{"heartbeat", 404, "not_found"},
		{"fail", 404, "not_found"},
		{"complete", 409, "failed_precondition"},
	} {
		status, body := f.call(t, "work2", "POST", fmt.Sprintf("/v1/jobs/%d/%s", job.ID, c.op), fenced)
		if status != c.status || errCode(body) != c.code {
			t.Errorf("%s by work2|w1 = %d %s, want %d %s", c.op, status, body, c.status, c.code)
		}
		_, after := f.call(t, "boss", "GET", fmt.Sprintf("/v1/jobs/%d", job.ID), "")
		if !bytes.Equal(before, after) {
			t.Errorf("%s by another principal changed the job:\n%s\n%s", c.op, before, after)
		}
	}
	if status, body := f.call(t, "work", "POST", fmt.Sprintf("/v1/jobs/%d/complete", job.ID), fenced); status != http.StatusOK {
		t.Errorf("complete by the holder = %d %s, want 200", status, body)
	}
}

func TestParsePrincipalsNamesTheBadLine(t *testing.T) {
	good := strings.Repeat("a", 64)
	tests := []struct {
		name, file, want string
	}{
		{"too few fields", "alice worker\n", "line 1"},
		{"unknown role", "# c\nalice cook " + good + "\n", "line 2: unknown role"},
		{"bad hash", "\nalice worker xyz\n", "line 2"},
		{"short hash", "alice worker abcd\n", "line 1"},
		{"duplicate name", "alice worker " + good + "\nalice admin " + strings.Repeat("b", 64) + "\n", "line 2"},
		{"bar in name", "al|ice worker " + good + "\n", "line 1"},
		{"empty", "# nothing\n", "no principals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.ParsePrincipals(strings.NewReader(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParsePrincipals() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestNewTokenIsFreshAndAuthenticates(t *testing.T) {
	t1, line, err := api.NewToken("alice", []api.Role{api.RoleWorker, api.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	t2, _, _ := api.NewToken("alice", []api.Role{api.RoleWorker})
	if t1 == t2 || len(t1) < 40 {
		t.Fatalf("tokens %q and %q: want distinct and ≥ 128 bits", t1, t2)
	}
	ps, err := api.ParsePrincipals(strings.NewReader(line))
	if err != nil {
		t.Fatalf("the printed line does not parse: %v", err)
	}
	p, ok := ps.Authenticate(t1)
	if !ok || p.Name != "alice" || !p.Has(api.RoleWorker) || !p.Has(api.RoleProducer) || p.Has(api.RoleAdmin) {
		t.Fatalf("Authenticate() = %+v, %v", p, ok)
	}
	if _, ok := ps.Authenticate(t2); ok {
		t.Fatal("Authenticate(another token) = ok")
	}
	if _, _, err := api.NewToken("bob", nil); err == nil {
		t.Fatal("NewToken without roles: want an error")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestLeaseNamedCheckNeedsTheWorkerRoleToRead: the role exception for
// checks is POST …/check only; GET of a lease whose name ends in "/check"
// reads the lease, which needs the worker role like any other lease.
func TestLeaseNamedCheckNeedsTheWorkerRoleToRead(t *testing.T) {
	f := newAuthFixture(t)
	if status, body := f.call(t, "work", "POST", "/v1/leases/x%2Fcheck/acquire", `{"holder":"h","ttl_ms":60000}`); status != http.StatusOK {
		t.Fatalf("acquire x/check = %d %s", status, body)
	}
	for _, path := range []string{"/v1/leases/x/check", "/v1/leases/x%2Fcheck"} {
		status, body := f.call(t, "prod", "GET", path, "")
		if status != http.StatusForbidden || errCode(body) != "permission_denied" {
			t.Errorf("GET %s as a producer = %d %s, want 403 permission_denied", path, status, body)
		}
		if bytes.Contains(body, []byte(`"holder"`)) {
			t.Errorf("GET %s as a producer shows the lease: %s", path, body)
		}
		if status, body := f.call(t, "work", "GET", path, ""); status != http.StatusOK || !bytes.Contains(body, []byte(`"name":"x/check"`)) {
			t.Errorf("GET %s as a worker = %d %s, want 200 and the lease", path, status, body)
		}
	}
	// The check itself stays open to every principal.
	if status, body := f.call(t, "prod", "POST", "/v1/leases/x%2Fcheck/check", `{"fencing_token":1}`); status != http.StatusOK {
		t.Errorf("POST check of x/check as a producer = %d %s, want 200", status, body)
	}
}

// TestBearerSchemeIsCaseInsensitive: RFC 9110 §11.1 makes the scheme name
// case-insensitive; the token is compared exactly.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	f := newAuthFixture(t)
	send := func(header string) (int, []byte) {
		req, err := http.NewRequest("GET", f.url+"/v1/queues", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", header)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	tok := f.tokens["prod"]
	for _, h := range []string{"Bearer " + tok, "bearer " + tok, "BEARER " + tok, "beArer  " + tok + " "} {
		if status, body := send(h); status != http.StatusOK {
			t.Errorf("Authorization: %q = %d %s, want 200", h[:min(len(h), 12)], status, body)
		}
	}
	for _, h := range []string{"Basic " + tok, "Bearer", "Bearer ", "Bearer" + tok, "bearer " + strings.ToUpper(tok)} {
		if status, body := send(h); status != http.StatusUnauthorized || errCode(body) != "unauthenticated" {
			t.Errorf("Authorization: %q = %d %s, want 401 unauthenticated", h[:min(len(h), 12)], status, body)
		}
	}
}
