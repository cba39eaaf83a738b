package postgres

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// tcpProxy forwards 127.0.0.1:port to the test server; down cuts every
// connection and refuses new ones, as a stopped PostgreSQL does.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// TestOutage_PostgreSQLGoneAnswersUnavailableAndRecovers: while the
// database cannot be reached, mutations and reads are refused with
// CodeUnavailable (503 over HTTP) and nothing acknowledged is lost; once it
// is back, the same store serves again.
func TestOutage_PostgreSQLGoneAnswersUnavailableAndRecovers(t *testing.T) {
	u, err := url.Parse(newTestDB(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	s := mustOpen(t, u.String(), Options{ConnectTimeout: 2 * time.Second})

	var acked []uint64
	for range 5 {
		acked = append(acked, mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"}).ID)
	}
	proxy.down()
	for i := range 3 {
		_, err := s.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"})
		if db.ErrorCode(err) != db.CodeUnavailable {
			t.Fatalf("enqueue %d while PostgreSQL is gone = %v, want CodeUnavailable", i, err)
		}
	}
	if _, err := s.GetJob(bg, acked[0]); db.ErrorCode(err) != db.CodeUnavailable {
		t.Fatalf("GetJob while PostgreSQL is gone = %v, want CodeUnavailable", err)
	}
	if _, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}}); db.ErrorCode(err) != db.CodeUnavailable {
		t.Fatalf("ClaimJobs while PostgreSQL is gone = %v, want CodeUnavailable", err)
	}
	if err := s.Ping(bg); db.ErrorCode(err) != db.CodeUnavailable {
		t.Fatalf("Ping while PostgreSQL is gone = %v, want CodeUnavailable", err)
	}
	proxy.up()
	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(bg) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store did not recover: Ping = %v", s.Ping(bg))
		}
		time.Sleep(20 * time.Millisecond)
	}
	acked = append(acked, mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"}).ID)
	page, err := s.ListJobs(bg, db.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != len(acked) {
		t.Fatalf("after the outage %d jobs, want the %d acknowledged ones only", len(page.Jobs), len(acked))
	}
	for i, j := range page.Jobs {
		if j.ID != acked[i] {
			t.Fatalf("job %d is %d, want %d", i, j.ID, acked[i])
		}
	}
	jobs, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Max: 10})
	if err != nil || len(jobs) != len(acked) {
		t.Fatalf("ClaimJobs after the outage = %d jobs, %v; want %d", len(jobs), err, len(acked))
	}
	if rep, err := s.VerifyAudit(bg); err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() = %+v, %v", rep, err)
	}
}
