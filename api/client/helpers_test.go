package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// server is the real API (api.New over a bbolt file in t.TempDir()) on
// 127.0.0.1:0.
type server struct {
	URL   string
	store db.Store
}

// newServer serves the API over a fresh store with rules (apitest.Start:
// on cleanup the file must pass the integrity check and audit verification).
func newServer(tb testing.TB, rules db.Rules, cfg api.Config) *server {
	tb.Helper()
	s := apitest.Start(tb, rules, cfg)
	return &server{URL: s.URL, store: s.Store}
}

// mustClient returns a client for s with opts.
func mustClient(tb testing.TB, base string, opts ...client.Option) *client.Client {
	tb.Helper()
	c, err := client.New(base, opts...)
	if err != nil {
		tb.Fatalf("client.New(%q) = %v", base, err)
	}
	return c
}

// sent is one request a recordingTransport saw.
type sent struct {
	Method, Path string // Path is the escaped path
	Body         string
}

// recordingTransport records every request and can hold requests at a
// gate (a paused process: nothing it sends gets out) until the gate opens
// or the request's context ends.
type recordingTransport struct {
	next http.RoundTripper

	mu   sync.Mutex
	reqs []sent
	gate chan struct{} // non-nil: held requests wait for it to close
	hold func(sent) bool
	// lose, when it returns true for a request, lets it reach the server
	// and drops the reply: the caller sees a transport error.
	lose func(sent) bool
}

var errReplyLost = errors.New("test: the reply was lost on the way")

// loseReplies drops the reply of every request for which lose returns true.
func (rt *recordingTransport) loseReplies(lose func(sent) bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.lose = lose
}

func newRecordingTransport() *recordingTransport {
	return &recordingTransport{next: http.DefaultTransport}
}

// pause holds every request for which hold returns true until resume.
func (rt *recordingTransport) pause(hold func(sent) bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.gate, rt.hold = make(chan struct{}), hold
}

func (rt *recordingTransport) resume() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.gate != nil {
		close(rt.gate)
		rt.gate, rt.hold = nil, nil
	}
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s := sent{Method: req.Method, Path: req.URL.EscapedPath()}
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		s.Body = string(b)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, s)
	gate, hold, lose := rt.gate, rt.hold, rt.lose
	rt.mu.Unlock()
	if gate != nil && hold(s) {
		select {
		case <-gate:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	resp, err := rt.next.RoundTrip(req)
	if err == nil && lose != nil && lose(s) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errReplyLost
	}
	return resp, err
}

// matching returns the recorded requests whose path ends with suffix.
func (rt *recordingTransport) matching(suffix string) []sent {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []sent
	for _, s := range rt.reqs {
		if strings.HasSuffix(s.Path, suffix) {
			out = append(out, s)
		}
	}
	return out
}
