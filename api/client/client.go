// Package client is a Go client for fenceq's v1 HTTP API, and a Worker
// runner that claims jobs and does the fencing right: it sends the claim's
// fencing token on every heartbeat, completion and failure, and stops a
// handler whose claim was lost.
//
// Every method takes a context and makes exactly one HTTP request. The
// client never retries on its own: a completion or an enqueue that failed
// in transit may or may not have been applied, and only the caller knows
// whether to send it again (an enqueue with an idempotency key, or a
// fenced call, is safe to repeat). Errors from the server are *Error values
// carrying the API code and HTTP status; test them with IsCode.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
)

// DefaultBaseURL is where "fenceq serve" listens unless told otherwise.
const DefaultBaseURL = "http://127.0.0.1:7420"

// The API's error codes, as in {"error":{"code":…}}.
const (
	CodeInvalidArgument    = "invalid_argument"    // 400
	CodeUnauthenticated    = "unauthenticated"     // 401
	CodePermissionDenied   = "permission_denied"   // 403
	CodeNotFound           = "not_found"           // 404
	CodeFailedPrecondition = "failed_precondition" // 409
	CodeResourceExhausted  = "resource_exhausted"  // 413
	CodeInternal           = "internal"            // 500
	CodeUnavailable        = "unavailable"         // 503

	// CodeAlreadyExists is never sent: a repeated idempotency key answers
	// 200 with the existing job.
	//
	// Deprecated: no reply has this code; it is kept so that code naming it
	// still compiles.
	CodeAlreadyExists = "already_exists"
)

// Error is an error answer of the server: the HTTP status and the API's
// code and message. Responses that are not the API's JSON error body (a
// proxy's error page) get a code derived from the status.
type Error struct {
	StatusCode int
	Code       string
	Message    string
	// Method and Path name the request that was answered.
	Method, Path string
}

func (e *Error) Error() string {
	return fmt.Sprintf("fenceq: %s %s: %d %s: %s", e.Method, e.Path, e.StatusCode, e.Code, e.Message)
}

// IsCode reports whether err is (or wraps) an *Error with the given API code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// StatusCode returns the HTTP status of an *Error in err's chain, or 0 when
// the server did not answer (a transport error, a cancelled context).
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// codeForStatus names a status whose body was not the API's error JSON.
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeFailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return CodeResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return CodeUnavailable
	}
	return CodeInternal
}

// Client calls one fenceq server. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	ua    string
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the client use hc. Its Timeout, if any, must be
// longer than the longest long-poll wait the caller asks for; prefer
// bounding calls with their context.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// New returns a client for the server at baseURL ("http://host:port",
// optionally with a path prefix when a proxy serves fenceq under one). An
// empty baseURL is DefaultBaseURL. Without WithHTTPClient it uses an
// http.Client without a timeout: calls are bounded by their contexts, and a
// long-poll claim may wait as long as it asked to. Its transport is
// net/http's default one but for the idle connections it keeps: up to
// maxIdlePerServer per server, not 2, so that a Client shared by many
// goroutines (producers, a Worker's claim, finish and heartbeat calls)
// keeps a connection for each call they make at once instead of dialing
// one per call and closing it after.
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("fenceq: base URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("fenceq: base URL %q must be http://host[:port] or https://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: u, hc: defaultHTTPClient, ua: "fenceq-go-client"}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient
	}
	return c, nil
}

// maxIdlePerServer is how many idle connections to one server the
// default transport keeps (net/http's keeps 2, and 100 in all).
const maxIdlePerServer = 100

// defaultHTTPClient is the Clients' without WithHTTPClient: one transport
// shared by all of them, as net/http's default client shares its own.
var defaultHTTPClient = &http.Client{Transport: func() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport // replaced by the program: its own
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = maxIdlePerServer
	t.MaxIdleConns = max(t.MaxIdleConns, maxIdlePerServer)
	return t
}()}

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// request is one API call: escapedPath is already percent-encoded.
type request struct {
	method      string
	escapedPath string
	query       url.Values
	body        any // marshalled to JSON; nil sends no body
}

// newRequest builds the HTTP request of r.
func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + r.escapedPath
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("fenceq: bad path %q: %w", r.escapedPath, err)
	}
	u.Path = p
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("fenceq: %s %s: encoding the request: %w", r.method, r.escapedPath, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("fenceq: %s %s: %w", r.method, r.escapedPath, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// send makes the request and returns the response when its status is 2xx;
// any other status is read and returned as an *Error.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fenceq: %s %s: %w", r.method, r.escapedPath, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	apiErr := &Error{StatusCode: resp.StatusCode, Method: r.method, Path: r.escapedPath}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		apiErr.Code, apiErr.Message = body.Error.Code, body.Error.Message
	} else {
		apiErr.Code = codeForStatus(resp.StatusCode)
		apiErr.Message = strings.TrimSpace(string(raw))
		if apiErr.Message == "" {
			apiErr.Message = http.StatusText(resp.StatusCode)
		}
	}
	return nil, apiErr
}

// do makes the request and decodes a JSON answer into out (when out is not
// nil). It returns the HTTP status.
func (c *Client) do(ctx context.Context, r request, out any) (int, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if err := decodeAnswer(resp.Body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("fenceq: %s %s: decoding the answer: %w", r.method, r.escapedPath, err)
	}
	// The decoder stops at the value's end; a chunked answer's last chunk
	// is still unread then, and a body closed before its end closes the
	// connection with it: every call would dial anew.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.StatusCode, nil
}

// decodeAnswer decodes one JSON value from r into out with goccy/go-json:
// into the same values as encoding/json (TestDecodeAnswer_SameAsEncodingJSON
// holds it to that for every answer type), in a fifth of the CPU. A worker
// decodes every job it claims and every completion's stored job; with
// encoding/json that was a third of its CPU (docs/performance.md).
func decodeAnswer(r io.Reader, out any) error { return gojson.NewDecoder(r).Decode(out) }

// millis converts a duration to whole milliseconds, rounding up so that a
// positive duration never becomes 0 ("the server's default").
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// jsonValue marshals v as a JSON value for a payload, result or
// attestation. json.RawMessage and []byte holding JSON pass through as they
// are; nil is absent.
func jsonValue(field string, v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(x) == 0 {
			return nil, nil
		}
		if !json.Valid(x) {
			return nil, fmt.Errorf("fenceq: %s is not valid JSON", field)
		}
		return x, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("fenceq: %s: %w", field, err)
	}
	return b, nil
}

// Healthz asks GET /healthz: nil while the process serves.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/healthz"}, nil)
	return err
}

// Readyz asks GET /readyz: nil while the store answers reads; an *Error
// with CodeUnavailable otherwise.
func (c *Client) Readyz(ctx context.Context) error {
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/readyz"}, nil)
	return err
}
