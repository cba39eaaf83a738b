package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

func TestClient_JobLifecycle(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()

	if err := c.Healthz(ctx); err != nil {
		t.Fatalf("Healthz() = %v", err)
	}
	if err := c.Readyz(ctx); err != nil {
		t.Fatalf("Readyz() = %v", err)
	}

	res, err := c.Enqueue(ctx, client.NewJob{Queue: "email", Kind: "welcome", Payload: map[string]string{"to": "ada@example.com"},
		Priority: 5, MaxAttempts: 3, IdempotencyKey: "welcome-ada"})
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	if !res.Created || res.Job.ID == 0 || res.Job.State != client.StateAvailable || string(res.Job.Payload) != `{"to":"ada@example.com"}` {
		t.Fatalf("Enqueue() = %+v, want a created available job with the payload", res)
	}
	again, err := c.Enqueue(ctx, client.NewJob{Queue: "email", IdempotencyKey: "welcome-ada"})
	if err != nil || again.Created || again.Job.ID != res.Job.ID {
		t.Fatalf("Enqueue() with the same idempotency key = %+v, %v; want job %d, not created", again, err, res.Job.ID)
	}
	delayed, err := c.Enqueue(ctx, client.NewJob{Queue: "email", Delay: time.Hour, Payload: json.RawMessage(`[1,2]`)})
	if err != nil || delayed.Job.State != client.StateScheduled || string(delayed.Job.Payload) != `[1,2]` {
		t.Fatalf("Enqueue(Delay: 1h) = %+v, %v; want a scheduled job with payload [1,2]", delayed, err)
	}
	batch, err := c.EnqueueBatch(ctx, []client.NewJob{{Queue: "email"}, {Queue: "sms", Payload: 7}})
	if err != nil || len(batch) != 2 || batch[1].Queue != "sms" || string(batch[1].Payload) != "7" {
		t.Fatalf("EnqueueBatch() = %+v, %v; want 2 jobs, the second on sms with payload 7", batch, err)
	}
	_, err = c.EnqueueBatch(ctx, []client.NewJob{{Queue: "ok"}, {Queue: "bad queue!"}})
	if !client.IsCode(err, client.CodeInvalidArgument) || !strings.Contains(err.Error(), "jobs[1]") {
		t.Fatalf("EnqueueBatch() with a bad queue = %v, want invalid_argument naming jobs[1]", err)
	}

	got, err := c.GetJob(ctx, res.Job.ID)
	if err != nil || got.Kind != "welcome" || got.Priority != 5 || got.MaxAttempts != 3 {
		t.Fatalf("GetJob() = %+v, %v", got, err)
	}
	_, err = c.GetJob(ctx, 999999)
	if !client.IsCode(err, client.CodeNotFound) || client.StatusCode(err) != http.StatusNotFound {
		t.Fatalf("GetJob(unknown) = %v, want not_found 404", err)
	}

	page, err := c.ListJobs(ctx, client.ListParams{Queue: "email", Limit: 2})
	if err != nil || len(page.Jobs) != 2 || page.Next == 0 {
		t.Fatalf("ListJobs(email, limit 2) = %+v, %v; want 2 jobs and a next cursor", page, err)
	}
	rest, err := c.ListJobs(ctx, client.ListParams{Queue: "email", After: page.Next})
	if err != nil || len(rest.Jobs) != 1 || rest.Next != 0 {
		t.Fatalf("ListJobs(after %d) = %+v, %v; want the last email job", page.Next, rest, err)
	}
	scheduled, err := c.ListJobs(ctx, client.ListParams{State: client.StateScheduled})
	if err != nil || len(scheduled.Jobs) != 1 || scheduled.Jobs[0].ID != delayed.Job.ID {
		t.Fatalf("ListJobs(state scheduled) = %+v, %v; want job %d", scheduled, err, delayed.Job.ID)
	}

	// Claim the priority-5 job, heartbeat it, complete it and claim the
	// next one in the same transaction.
	job, ok, err := c.Claim(ctx, client.ClaimParams{Worker: "w1", Queues: []string{"email"}, Lease: 10 * time.Second})
	if err != nil || !ok || job.ID != res.Job.ID || job.FencingToken != 1 || job.State != client.StateClaimed {
		t.Fatalf("Claim() = %+v, %v, %v; want job %d with token 1", job, ok, err, res.Job.ID)
	}
	hb, err := c.Heartbeat(ctx, job.ID, client.HeartbeatParams{Worker: "w1", FencingToken: job.FencingToken, Lease: 20 * time.Second})
	if err != nil || !hb.LeaseExpiresAt.After(job.LeaseExpiresAt) {
		t.Fatalf("Heartbeat() = %+v, %v; want a later lease expiry than %v", hb, err, job.LeaseExpiresAt)
	}
	_, err = c.Heartbeat(ctx, job.ID, client.HeartbeatParams{Worker: "w1", FencingToken: 2})
	if !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("Heartbeat() with a wrong token = %v, want not_found", err)
	}
	check, err := c.CheckJob(ctx, job.ID, job.FencingToken)
	if err != nil || !check.Current || check.FencingToken != 1 {
		t.Fatalf("CheckJob(current token) = %+v, %v", check, err)
	}
	done, next, err := c.CompleteAndClaim(ctx, job.ID,
		client.CompleteParams{Worker: "w1", FencingToken: job.FencingToken, Result: map[string]bool{"sent": true}, Attestation: "sig"},
		client.ClaimNext{Queues: []string{"email"}})
	if err != nil || done.State != client.StateCompleted || string(done.Result) != `{"sent":true}` || string(done.Attestation) != `"sig"` {
		t.Fatalf("CompleteAndClaim() = %+v, %v; want completed with the result and attestation", done, err)
	}
	if len(next) != 1 || next[0].State != client.StateClaimed || next[0].FencingToken != 1 {
		t.Fatalf("CompleteAndClaim() next = %+v, want one claimed job", next)
	}
	_, err = c.CheckJob(ctx, job.ID, job.FencingToken)
	if !client.IsCode(err, client.CodeFailedPrecondition) {
		t.Fatalf("CheckJob() after the completion = %v, want failed_precondition", err)
	}
	_, err = c.Complete(ctx, job.ID, client.CompleteParams{Worker: "w1", FencingToken: job.FencingToken})
	if !client.IsCode(err, client.CodeFailedPrecondition) || client.StatusCode(err) != http.StatusConflict {
		t.Fatalf("Complete() twice = %v, want failed_precondition 409", err)
	}

	// Fail with a delay, then final: the job is dead; retry revives it.
	delay := time.Hour
	failed, err := c.Fail(ctx, next[0].ID, client.FailParams{Worker: "w1", FencingToken: next[0].FencingToken, Error: "smtp down", RetryDelay: &delay})
	if err != nil || failed.State != client.StateScheduled || failed.RunAt.Before(time.Now().Add(50*time.Minute)) || failed.LastError != "smtp down" {
		t.Fatalf("Fail(RetryDelay 1h) = %+v, %v; want scheduled an hour from now with the error", failed, err)
	}
	_, err = c.Fail(ctx, next[0].ID, client.FailParams{Worker: "w1", FencingToken: next[0].FencingToken, Error: "again"})
	if !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("Fail() of a job no longer claimed = %v, want not_found", err)
	}
	if _, err := c.Enqueue(ctx, client.NewJob{Queue: "email"}); err != nil {
		t.Fatal(err)
	}
	many, err := c.ClaimMany(ctx, client.ClaimParams{Worker: "w2", Queues: []string{"sms", "email"}}, 5)
	if err != nil || len(many) != 2 {
		t.Fatalf("ClaimMany(max 5) = %+v, %v; want the 2 claimable jobs", many, err)
	}
	for _, j := range many {
		dead, err := c.Fail(ctx, j.ID, client.FailParams{Worker: "w2", FencingToken: j.FencingToken, Error: "bad", Final: true})
		if err != nil || dead.State != client.StateDead {
			t.Fatalf("Fail(Final) = %+v, %v; want dead", dead, err)
		}
	}
	_, ok, err = c.Claim(ctx, client.ClaimParams{Worker: "w2", Queues: []string{"sms"}, Wait: 50 * time.Millisecond})
	if err != nil || ok {
		t.Fatalf("Claim() of an empty queue = %v, %v; want nothing, no error", ok, err)
	}
	retried, err := c.RetryJob(ctx, many[0].ID)
	if err != nil || retried.State != client.StateAvailable {
		t.Fatalf("RetryJob() = %+v, %v; want available", retried, err)
	}
	cancelled, err := c.CancelJob(ctx, many[0].ID)
	if err != nil || cancelled.State != client.StateCancelled {
		t.Fatalf("CancelJob() = %+v, %v; want cancelled", cancelled, err)
	}
	_, err = c.CancelJob(ctx, job.ID)
	if !client.IsCode(err, client.CodeFailedPrecondition) {
		t.Fatalf("CancelJob() of a completed job = %v, want failed_precondition", err)
	}

	queues, err := c.Queues(ctx)
	if err != nil {
		t.Fatalf("Queues() = %v", err)
	}
	counts := map[string]map[string]uint64{}
	for _, q := range queues {
		counts[q.Queue] = q.Counts
	}
	if counts["email"][client.StateCompleted] != 1 || counts["email"][client.StateScheduled] != 2 ||
		counts["email"][client.StateDead]+counts["sms"][client.StateDead] != 1 ||
		counts["email"][client.StateCancelled]+counts["sms"][client.StateCancelled] != 1 {
		t.Fatalf("Queues() = %+v", queues)
	}
	stats, err := c.Stats(ctx)
	if err != nil || stats.Commits == 0 || len(stats.Refusals) == 0 {
		t.Fatalf("Stats() = %+v, %v; want commits and refusals", stats, err)
	}

	audit, err := c.Audit(ctx, 0, 3)
	if err != nil || len(audit.Records) != 3 || audit.Records[0].Seq != 1 || audit.Next != 3 {
		t.Fatalf("Audit(0, 3) = %+v, %v; want records 1..3 and next 3", audit, err)
	}
	rep, err := c.VerifyAudit(ctx)
	if err != nil || !rep.OK || rep.Records == 0 || rep.HeadSeq != rep.Records {
		t.Fatalf("VerifyAudit() = %+v, %v; want OK", rep, err)
	}
}

func TestClient_LeaseNamesAreOnePathSegment(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	rt := newRecordingTransport()
	c := mustClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: rt}))
	ctx := context.Background()

	for _, name := range []string{"/data/a.csv", "reports/2031 Q1 100%.pdf", "plain", "ünïcode?#&"} {
		l, err := c.AcquireLease(ctx, name, client.AcquireLeaseParams{Holder: "etl-1", TTL: 10 * time.Second})
		if err != nil || l.Name != name || l.FencingToken != 1 || !l.Held {
			t.Fatalf("AcquireLease(%q) = %+v, %v; want it held with token 1", name, l, err)
		}
		_, err = c.AcquireLease(ctx, name, client.AcquireLeaseParams{Holder: "etl-2"})
		if !client.IsCode(err, client.CodeFailedPrecondition) {
			t.Fatalf("AcquireLease(%q) while held = %v, want failed_precondition", name, err)
		}
		if chk, err := c.CheckLease(ctx, name, 1); err != nil || !chk.Current {
			t.Fatalf("CheckLease(%q, 1) = %+v, %v", name, chk, err)
		}
		if l, err := c.RenewLease(ctx, name, client.RenewLeaseParams{Holder: "etl-1", FencingToken: 1, TTL: 20 * time.Second}); err != nil || !l.ExpiresAt.After(time.Now().Add(15*time.Second)) {
			t.Fatalf("RenewLease(%q) = %+v, %v", name, l, err)
		}
		if _, err := c.RenewLease(ctx, name, client.RenewLeaseParams{Holder: "etl-1", FencingToken: 7}); !client.IsCode(err, client.CodeFailedPrecondition) {
			t.Fatalf("RenewLease(%q) with a wrong token = %v, want failed_precondition", name, err)
		}
		if got, err := c.GetLease(ctx, name); err != nil || got.Name != name || got.Holder != "local|etl-1" {
			t.Fatalf("GetLease(%q) = %+v, %v", name, got, err)
		}
		if l, err := c.ReleaseLease(ctx, name, "etl-1", 1); err != nil || l.Held {
			t.Fatalf("ReleaseLease(%q) = %+v, %v; want not held", name, l, err)
		}
		if l, err := c.AcquireLease(ctx, name, client.AcquireLeaseParams{Holder: "etl-2"}); err != nil || l.FencingToken != 2 {
			t.Fatalf("AcquireLease(%q) after release = %+v, %v; want token 2", name, l, err)
		}
		if _, err := c.CheckLease(ctx, name, 1); !client.IsCode(err, client.CodeFailedPrecondition) {
			t.Fatalf("CheckLease(%q, 1) after a new acquire = %v, want failed_precondition", name, err)
		}
	}
	// Every lease request put the name in exactly one segment.
	for _, s := range rt.matching("") {
		rest, ok := strings.CutPrefix(s.Path, "/v1/leases/")
		if !ok {
			continue
		}
		if n := strings.Count(rest, "/"); n > 1 {
			t.Errorf("%s %s: the name spans %d segments, want one", s.Method, s.Path, n)
		}
	}
	if _, err := c.GetLease(ctx, "never"); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("GetLease(never) = %v, want not_found", err)
	}
	page, err := c.ListLeases(ctx, client.ListLeasesParams{Prefix: "/data/"})
	if err != nil || len(page.Leases) != 1 || page.Leases[0].Name != "/data/a.csv" {
		t.Fatalf("ListLeases(prefix /data/) = %+v, %v", page, err)
	}
	all, err := c.ListLeases(ctx, client.ListLeasesParams{Limit: 2})
	if err != nil || len(all.Leases) != 2 || all.Next == "" {
		t.Fatalf("ListLeases(limit 2) = %+v, %v; want 2 and a next cursor", all, err)
	}
	if _, err := c.AcquireLease(ctx, "", client.AcquireLeaseParams{Holder: "x"}); err == nil {
		t.Fatal("AcquireLease(\"\") = nil error, want one")
	}
}

func TestClient_BackupIsAConsistentFile(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, client.NewJob{Queue: "q", Payload: "before the backup"})
	if err != nil {
		t.Fatal(err)
	}

	// Writers keep going while the snapshot is taken.
	stop := make(chan struct{})
	writersDone := make(chan struct{})
	go func() {
		defer close(writersDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Enqueue(ctx, client.NewJob{Queue: "busy"}); err != nil {
				t.Errorf("Enqueue() during backup = %v", err)
				return
			}
		}
	}()
	var buf bytes.Buffer
	n, err := c.Backup(ctx, &buf)
	close(stop)
	<-writersDone
	if err != nil || n != int64(buf.Len()) || n == 0 {
		t.Fatalf("Backup() = %d, %v (buffer %d bytes)", n, err, buf.Len())
	}

	// The raw answer: a download, not JSON.
	resp, err := http.Get(srv.URL + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); resp.StatusCode != 200 ||
		ct != "application/octet-stream" || !strings.HasPrefix(cd, `attachment; filename="fenceq-backup-`) {
		t.Fatalf("GET /v1/backup = %d, Content-Type %q, Content-Disposition %q", resp.StatusCode, ct, cd)
	}
	// A cancelled backup stops with the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := srv.store.(db.Backuper).Backup(cctx, io.Discard); !errors.Is(err, context.Canceled) {
		t.Fatalf("Store.Backup(cancelled) = %v, want context.Canceled", err)
	}

	path := filepath.Join(t.TempDir(), "restored.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	restored, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("bolt.Open(backup) = %v", err)
	}
	defer restored.Close()
	if err := restored.Check(); err != nil {
		t.Fatalf("Check() of the backup = %v", err)
	}
	if rep, err := restored.VerifyAudit(ctx); err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() of the backup = %+v, %v", rep, err)
	}
	j, err := restored.GetJob(ctx, res.Job.ID)
	if err != nil || string(j.Payload) != `"before the backup"` {
		t.Fatalf("GetJob(%d) in the backup = %+v, %v", res.Job.ID, j, err)
	}
}

func TestClient_TokenAndRoles(t *testing.T) {
	prodToken, prodLine, err := api.NewToken("prod", []api.Role{api.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	adminToken, adminLine, err := api.NewToken("root", []api.Role{api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	principals, err := api.ParsePrincipals(strings.NewReader(prodLine + "\n" + adminLine + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, db.Rules{}, api.Config{Principals: principals})
	ctx := context.Background()

	anon := mustClient(t, srv.URL)
	if _, err := anon.Enqueue(ctx, client.NewJob{}); !client.IsCode(err, client.CodeUnauthenticated) || client.StatusCode(err) != 401 {
		t.Fatalf("Enqueue() without a token = %v, want unauthenticated 401", err)
	}
	prod := mustClient(t, srv.URL, client.WithToken(prodToken))
	if _, err := prod.Enqueue(ctx, client.NewJob{}); err != nil {
		t.Fatalf("Enqueue() as producer = %v", err)
	}
	if _, err := prod.Backup(ctx, &bytes.Buffer{}); !client.IsCode(err, client.CodePermissionDenied) {
		t.Fatalf("Backup() as producer = %v, want permission_denied", err)
	}
	admin := mustClient(t, srv.URL, client.WithToken(adminToken))
	var buf bytes.Buffer
	if n, err := admin.Backup(ctx, &buf); err != nil || n == 0 {
		t.Fatalf("Backup() as admin = %d, %v", n, err)
	}
}

func TestClient_ErrorsThatAreNotTheAPIs(t *testing.T) {
	// A proxy's error page: the code comes from the status.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer proxy.Close()
	_, err := mustClient(t, proxy.URL).GetJob(context.Background(), 1)
	if !client.IsCode(err, client.CodeUnavailable) || client.StatusCode(err) != http.StatusBadGateway || !strings.Contains(err.Error(), "bad gateway") {
		t.Fatalf("GetJob() through a failing proxy = %v, want unavailable 502 with the body", err)
	}

	// No server at all: not an *Error, status 0.
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	_, err = mustClient(t, url).GetJob(context.Background(), 1)
	if err == nil || client.StatusCode(err) != 0 {
		t.Fatalf("GetJob() without a server = %v, want a transport error", err)
	}

	for _, bad := range []string{"127.0.0.1:7420", "ftp://x", "http://"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("client.New(%q) = nil error, want one", bad)
		}
	}
}

func TestClient_DoesNotRetryAPostWhoseAnswerWasLost(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		// Read the request, then drop the connection without answering.
		_, _ = r.Body.Read(make([]byte, 1024))
		hj, _ := w.(http.Hijacker)
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	if _, err := c.Complete(ctx, 1, client.CompleteParams{Worker: "w", FencingToken: 1}); err == nil {
		t.Fatal("Complete() with a dropped connection = nil error")
	}
	if _, err := c.Enqueue(ctx, client.NewJob{}); err == nil {
		t.Fatal("Enqueue() with a dropped connection = nil error")
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the server saw %d requests for 2 calls, want 2 (no retries)", n)
	}
}

func TestClient_BaseURLWithAPathPrefix(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	inner, _ := http.NewRequest("GET", srv.URL, nil)
	// A proxy that serves fenceq under /queue/.
	proxy := httptest.NewServer(http.StripPrefix("/queue", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Scheme, r.URL.Host = inner.URL.Scheme, inner.URL.Host
		r.RequestURI = ""
		r.Host = inner.URL.Host
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})))
	defer proxy.Close()
	c := mustClient(t, proxy.URL+"/queue/")
	if err := c.Healthz(context.Background()); err != nil {
		t.Fatalf("Healthz() under /queue/ = %v", err)
	}
	if c.BaseURL() != proxy.URL+"/queue" {
		t.Fatalf("BaseURL() = %q, want %q", c.BaseURL(), proxy.URL+"/queue")
	}
}
