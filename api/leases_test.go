package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/internal/testclock"
)

// leaseServer is the real API on 127.0.0.1:0 over a bbolt file in
// t.TempDir(), with an injected clock.
type leaseServer struct {
	t     *testing.T
	url   string
	store *bolt.Store
	clock *testclock.Clock
}

func newLeaseServer(t *testing.T) *leaseServer {
	t.Helper()
	clk := testclock.New(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{Rules: db.Rules{Now: clk.Now}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(store, api.Config{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() {
		srv.Close()
		if err := store.Check(); err != nil {
			t.Errorf("store.Check() = %v", err)
		}
		if rep, err := store.VerifyAudit(context.Background()); err != nil || !rep.OK {
			t.Errorf("VerifyAudit() = %+v, %v; want OK", rep, err)
		}
		store.Close()
	})
	return &leaseServer{t: t, url: srv.URL, store: store, clock: clk}
}

type leaseReply struct {
	status int
	body   string
}

func (r leaseReply) String() string { return fmt.Sprintf("%d %s", r.status, strings.TrimSpace(r.body)) }

// call sends method path (already escaped as the client means it) with a
// JSON body (nil: none).
func (ls *leaseServer) call(method, path string, body any) leaseReply {
	ls.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			ls.t.Fatal(err)
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, ls.url+path, rd)
	if err != nil {
		ls.t.Fatalf("NewRequest(%s %s): %v", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ls.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		ls.t.Fatal(err)
	}
	return leaseReply{resp.StatusCode, string(raw)}
}

// leaseJSON is the part of a lease's JSON the tests look at.
type leaseJSON struct {
	Name         string     `json:"name"`
	Holder       string     `json:"holder"`
	FencingToken uint64     `json:"fencing_token"`
	Held         bool       `json:"held"`
	ExpiresAt    *time.Time `json:"expires_at"`
	Current      bool       `json:"current"`
}

func wantLease(t *testing.T, what string, r leaseReply) leaseJSON {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("%s: got %v, want 200", what, r)
	}
	var l leaseJSON
	if err := json.Unmarshal([]byte(r.body), &l); err != nil {
		t.Fatalf("%s: body %s: %v", what, r.body, err)
	}
	return l
}

// wantCode checks an error reply's status and code, and that its message
// mentions each of mentions.
func wantCode(t *testing.T, what string, r leaseReply, status int, code string, mentions ...string) {
	t.Helper()
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if r.status != status || json.Unmarshal([]byte(r.body), &body) != nil || body.Error.Code != code {
		t.Errorf("%s: got %v, want %d %s", what, r, status, code)
		return
	}
	for _, m := range mentions {
		if !strings.Contains(body.Error.Message, m) {
			t.Errorf("%s: message %q does not mention %q", what, body.Error.Message, m)
		}
	}
}

// encodedPath addresses name as one percent-encoded segment; rawPath with
// its slashes as they are (each segment percent-encoded on its own).
func encodedPath(name string) string { return "/v1/leases/" + url.PathEscape(name) }

func rawPath(name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/v1/leases/" + strings.Join(segs, "/")
}

// TestLeases_NamesWithSlashesAndUnicode acquires names through one form of
// the path and reaches the same lease through the other.
func TestLeases_NamesWithSlashesAndUnicode(t *testing.T) {
	ls := newLeaseServer(t)
	names := []string{
		"/data/a.csv",
		"a/b/c",
		"zürich/日本語 file.txt",
		"100% done?#frag",
		"acquire",             // a name equal to an action
		"jobs/x/acquire",      // a name ending in an action
		"trailing/",           // a name ending in a slash
		"+plus+ & semi;colon", // characters a query would treat specially
	}
	for _, name := range names {
		l := wantLease(t, "acquire "+name, ls.call("POST", encodedPath(name)+"/acquire", map[string]any{"holder": "a", "ttl_ms": 60000}))
		if l.Name != name || l.FencingToken != 1 || !l.Held || l.Holder != "local|a" {
			t.Errorf("acquire %q = %+v, want that name held by local|a with token 1", name, l)
		}
		wantCode(t, "acquire again via raw slashes "+name, ls.call("POST", rawPath(name)+"/acquire", map[string]any{"holder": "b"}),
			http.StatusConflict, "failed_precondition", "local|a")
		if g := wantLease(t, "GET raw "+name, ls.call("GET", rawPath(name), nil)); g.Name != name || g.FencingToken != 1 {
			t.Errorf("GET %s = %+v, want %q token 1", rawPath(name), g, name)
		}
		if g := wantLease(t, "GET encoded "+name, ls.call("GET", encodedPath(name), nil)); g.Name != name || g.FencingToken != 1 {
			t.Errorf("GET %s = %+v, want %q token 1", encodedPath(name), g, name)
		}
		wantLease(t, "check raw "+name, ls.call("POST", rawPath(name)+"/check", map[string]any{"fencing_token": 1}))
		wantLease(t, "release raw "+name, ls.call("POST", rawPath(name)+"/release", map[string]any{"holder": "a", "fencing_token": 1}))
		if l := wantLease(t, "acquire after release "+name, ls.call("POST", encodedPath(name)+"/acquire", map[string]any{"holder": "b"})); l.FencingToken != 2 {
			t.Errorf("acquire %q after release token = %d, want 2", name, l.FencingToken)
		}
	}
	var list struct {
		Leases []leaseJSON `json:"leases"`
	}
	r := ls.call("GET", "/v1/leases", nil)
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK || len(list.Leases) != len(names) {
		t.Fatalf("GET /v1/leases = %v, want %d leases", r, len(names))
	}
	r = ls.call("GET", "/v1/leases?prefix="+url.QueryEscape("a/"), nil)
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Leases) != 1 || list.Leases[0].Name != "a/b/c" {
		t.Errorf("GET /v1/leases?prefix=a/ = %v, want only a/b/c", r)
	}
}

func TestLeases_BadNamesAreRefused(t *testing.T) {
	ls := newLeaseServer(t)
	body := map[string]any{"holder": "a"}
	wantCode(t, "empty name", ls.call("POST", "/v1/leases//acquire", body), http.StatusBadRequest, "invalid_argument", "empty")
	wantCode(t, "GET empty name", ls.call("GET", "/v1/leases/", nil), http.StatusBadRequest, "invalid_argument", "empty")
	wantCode(t, "control character", ls.call("POST", "/v1/leases/a%0Ab/acquire", body), http.StatusBadRequest, "invalid_argument", "control")
	wantCode(t, "invalid UTF-8", ls.call("POST", "/v1/leases/a%FF/acquire", body), http.StatusBadRequest, "invalid_argument", "UTF-8")
	wantCode(t, "too long", ls.call("POST", encodedPath(strings.Repeat("x", 1025))+"/acquire", body), http.StatusBadRequest, "invalid_argument", "1024")
	wantCode(t, "no action", ls.call("POST", "/v1/leases/just-a-name", body), http.StatusMethodNotAllowed, "invalid_argument", "action")
	wantCode(t, "unknown action", ls.call("POST", "/v1/leases/n/steal", body), http.StatusMethodNotAllowed, "invalid_argument", "steal")
	wantCode(t, "never acquired", ls.call("GET", "/v1/leases/nope", nil), http.StatusNotFound, "not_found")
	if n := leaseListLen(t, ls); n != 0 {
		t.Errorf("refused requests stored %d leases", n)
	}
}

func leaseListLen(t *testing.T, ls *leaseServer) int {
	t.Helper()
	var list struct {
		Leases []leaseJSON `json:"leases"`
	}
	r := ls.call("GET", "/v1/leases", nil)
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /v1/leases = %v", r)
	}
	return len(list.Leases)
}

// TestLeases_Lifecycle walks acquire, a competing acquire, check, expiry by
// the injected clock, a stale renew and release (refused, nothing changed),
// and the new holder's renew and release, through HTTP.
func TestLeases_Lifecycle(t *testing.T) {
	ls := newLeaseServer(t)
	p := encodedPath("/data/a.csv")

	a := wantLease(t, "acquire a", ls.call("POST", p+"/acquire", map[string]any{"holder": "a", "ttl_ms": 10000}))
	if a.FencingToken != 1 || a.ExpiresAt == nil || !a.ExpiresAt.Equal(ls.clock.Now().Add(10*time.Second)) {
		t.Fatalf("acquire a = %+v, want token 1 until now+10s", a)
	}
	expiry := a.ExpiresAt.Format(time.RFC3339Nano)
	wantCode(t, "acquire b while held", ls.call("POST", p+"/acquire", map[string]any{"holder": "b"}),
		http.StatusConflict, "failed_precondition", "local|a", expiry)
	wantCode(t, "acquire a again while held", ls.call("POST", p+"/acquire", map[string]any{"holder": "a"}),
		http.StatusConflict, "failed_precondition", "local|a", expiry)
	if c := wantLease(t, "check 1", ls.call("POST", p+"/check", map[string]any{"fencing_token": 1})); !c.Current || c.FencingToken != 1 {
		t.Errorf("check 1 = %+v, want current", c)
	}

	ls.clock.Advance(10 * time.Second) // a is paused past its lease
	wantCode(t, "check expired", ls.call("POST", p+"/check", map[string]any{"fencing_token": 1}), http.StatusConflict, "failed_precondition", "expired")
	b := wantLease(t, "acquire b after expiry", ls.call("POST", p+"/acquire", map[string]any{"holder": "b", "ttl_ms": 10000}))
	if b.FencingToken != 2 || b.Holder != "local|b" {
		t.Fatalf("acquire b = %+v, want token 2 for local|b", b)
	}

	before := ls.call("GET", p, nil)
	auditBefore, _ := ls.store.VerifyAudit(context.Background())
	wantCode(t, "stale renew", ls.call("POST", p+"/renew", map[string]any{"holder": "a", "fencing_token": 1}), http.StatusConflict, "failed_precondition")
	wantCode(t, "stale release", ls.call("POST", p+"/release", map[string]any{"holder": "a", "fencing_token": 1}), http.StatusConflict, "failed_precondition")
	wantCode(t, "renew with b's token by a", ls.call("POST", p+"/renew", map[string]any{"holder": "a", "fencing_token": 2}), http.StatusConflict, "failed_precondition", "local|b")
	wantCode(t, "check stale", ls.call("POST", p+"/check", map[string]any{"fencing_token": 1}), http.StatusConflict, "failed_precondition", "stale")
	wantCode(t, "renew without token", ls.call("POST", p+"/renew", map[string]any{"holder": "b"}), http.StatusBadRequest, "invalid_argument", "fencing_token")
	wantCode(t, "token above u32", ls.call("POST", p+"/release", map[string]any{"holder": "b", "fencing_token": uint64(4294967296)}), http.StatusBadRequest, "invalid_argument", "4294967295")
	wantCode(t, "check token 0", ls.call("POST", p+"/check", map[string]any{"fencing_token": 0}), http.StatusBadRequest, "invalid_argument")
	wantCode(t, "ttl of the wrong type", ls.call("POST", p+"/renew", map[string]any{"holder": "b", "fencing_token": 2, "ttl_ms": "10s"}), http.StatusBadRequest, "invalid_argument", "ttl_ms")
	wantCode(t, "negative wait", ls.call("POST", p+"/acquire", map[string]any{"holder": "c", "wait_ms": -1}), http.StatusBadRequest, "invalid_argument", "wait_ms")
	wantCode(t, "no holder", ls.call("POST", p+"/acquire", map[string]any{}), http.StatusBadRequest, "invalid_argument", "holder")
	wantCode(t, "no body", ls.call("POST", p+"/release", nil), http.StatusBadRequest, "invalid_argument")
	if after := ls.call("GET", p, nil); after != before {
		t.Errorf("refused requests changed the lease:\nbefore %v\nafter  %v", before, after)
	}
	if auditAfter, _ := ls.store.VerifyAudit(context.Background()); auditAfter.HeadSeq != auditBefore.HeadSeq {
		t.Errorf("refused requests appended %d audit records", auditAfter.HeadSeq-auditBefore.HeadSeq)
	}

	ls.clock.Advance(5 * time.Second)
	r := wantLease(t, "renew b", ls.call("POST", p+"/renew", map[string]any{"holder": "b", "fencing_token": 2, "ttl_ms": 30000}))
	if r.FencingToken != 2 || !r.ExpiresAt.Equal(ls.clock.Now().Add(30*time.Second)) {
		t.Errorf("renew b = %+v, want token 2 until now+30s", r)
	}
	rel := wantLease(t, "release b", ls.call("POST", p+"/release", map[string]any{"holder": "b", "fencing_token": 2}))
	if rel.Held || rel.Holder != "" || rel.FencingToken != 2 || rel.ExpiresAt != nil {
		t.Errorf("release b = %+v, want free, token 2 kept", rel)
	}

	recs, err := ls.store.ListAudit(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, rec := range recs {
		if rec.Subject != "lease:/data/a.csv" {
			t.Errorf("audit subject = %q, want lease:/data/a.csv", rec.Subject)
		}
		actions = append(actions, fmt.Sprintf("%s %d", rec.Action, rec.Token))
	}
	if got, want := strings.Join(actions, ", "), "acquire 1, acquire 2, renew 2, release 2"; got != want {
		t.Errorf("audit = %s, want %s", got, want)
	}
}

func TestLeases_WaitWakesWhenTheHolderReleases(t *testing.T) {
	ls := newLeaseServer(t)
	p := encodedPath("/data/a.csv")
	wantLease(t, "acquire a", ls.call("POST", p+"/acquire", map[string]any{"holder": "a", "ttl_ms": 3600000}))
	done := make(chan leaseReply, 1)
	start := time.Now()
	go func() {
		done <- ls.call("POST", p+"/acquire", map[string]any{"holder": "b", "wait_ms": 30000})
	}()
	// Give the waiter time to start waiting; if it has not, its first
	// attempt finds the lease free and the test still holds.
	time.Sleep(50 * time.Millisecond)
	wantLease(t, "release a", ls.call("POST", p+"/release", map[string]any{"holder": "a", "fencing_token": 1}))
	select {
	case r := <-done:
		if l := wantLease(t, "waiting acquire", r); l.FencingToken != 2 || l.Holder != "local|b" {
			t.Errorf("waiting acquire = %+v, want token 2 for local|b", l)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("waiting acquire took %v", d)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("waiting acquire did not return after the release")
	}
	// A wait that ends while the lease is held answers 409 with the holder.
	wantCode(t, "wait runs out", ls.call("POST", p+"/acquire", map[string]any{"holder": "c", "wait_ms": 20}),
		http.StatusConflict, "failed_precondition", "local|b")
}

func TestJobs_Check(t *testing.T) {
	ls := newLeaseServer(t)
	var job struct {
		ID           uint64 `json:"id"`
		FencingToken uint64 `json:"fencing_token"`
	}
	r := ls.call("POST", "/v1/jobs", map[string]any{"queue": "q", "payload": map[string]any{"secret": "x"}})
	if err := json.Unmarshal([]byte(r.body), &job); err != nil || r.status != http.StatusCreated {
		t.Fatalf("enqueue = %v", r)
	}
	check := func(token any) leaseReply {
		return ls.call("POST", fmt.Sprintf("/v1/jobs/%d/check", job.ID), map[string]any{"fencing_token": token})
	}
	wantCode(t, "check before any claim", check(1), http.StatusConflict, "failed_precondition", "available")
	claim := func() uint64 {
		t.Helper()
		r := ls.call("POST", "/v1/claim", map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 1000})
		if err := json.Unmarshal([]byte(r.body), &job); err != nil || r.status != http.StatusOK {
			t.Fatalf("claim = %v", r)
		}
		return job.FencingToken
	}
	first := claim()
	r = check(first)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"current":true`) || strings.Contains(r.body, "secret") {
		t.Fatalf("check current claim = %v, want 200 current without the payload", r)
	}
	ls.clock.Advance(2 * time.Second)
	if r := check(first); r.status != http.StatusOK {
		t.Errorf("check after expiry, before a re-claim = %v, want 200", r)
	}
	second := claim() // a restart of w1
	wantCode(t, "check first claim after re-claim", check(first), http.StatusConflict, "failed_precondition")
	if r := check(second); r.status != http.StatusOK {
		t.Errorf("check second claim = %v, want 200", r)
	}
	wantCode(t, "token 0", check(0), http.StatusBadRequest, "invalid_argument")
	wantCode(t, "token above u32", check(uint64(4294967296)), http.StatusBadRequest, "invalid_argument", "4294967295")
	wantCode(t, "token of the wrong type", check("2"), http.StatusBadRequest, "invalid_argument", "fencing_token")
	wantCode(t, "unknown job", ls.call("POST", "/v1/jobs/999/check", map[string]any{"fencing_token": 1}), http.StatusNotFound, "not_found")
	r = ls.call("POST", fmt.Sprintf("/v1/jobs/%d/complete", job.ID), map[string]any{"worker": "w1", "fencing_token": second})
	if r.status != http.StatusOK {
		t.Fatalf("complete = %v", r)
	}
	wantCode(t, "check after completion", check(second), http.StatusConflict, "failed_precondition", "completed")
}
