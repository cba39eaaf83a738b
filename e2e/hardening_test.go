package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/bolt"
	bbolt "go.etcd.io/bbolt"
)

func TestServeRefusesANonLoopbackAddressWithoutAnAuthFile(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "q.db")
	code, _, stderr := runFenceq(t, nil, "serve", "--db", dbPath, "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "--auth-file") || !strings.Contains(stderr, "--insecure") {
		t.Fatalf("serve on 0.0.0.0 without auth = exit %d, stderr %q; want 2 and a reason", code, stderr)
	}
	if _, err := os.Stat(dbPath); err == nil {
		t.Error("the refused start created the database file")
	}
	p, _ := startServing(t, nil, "--db", dbPath, "--listen", "0.0.0.0:0", "--insecure")
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("--insecure serve exited %d", code)
	}
}

func TestServeWithAnAuthFile(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := runFenceq(t, nil, "token", "new", "alice", "--roles", "producer,worker")
	if code != 0 {
		t.Fatalf("token new = %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	token, line := lines[1], lines[len(lines)-1]
	authFile := filepath.Join(dir, "auth")
	os.WriteFile(authFile, []byte("# fenceq principals\n"+line+"\n"), 0o600)

	// A malformed file stops the start with its line number.
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(line+"\nbob cook "+strings.Repeat("0", 64)+"\n"), 0o600)
	code, _, stderr = runFenceq(t, nil, "serve", "--db", filepath.Join(dir, "b.db"), "--listen", "127.0.0.1:0", "--auth-file", bad)
	if code == 0 || !strings.Contains(stderr, "line 2") {
		t.Fatalf("serve with a bad auth file = exit %d, %q; want failure naming line 2", code, stderr)
	}

	_, base := startServing(t, nil, "--db", filepath.Join(dir, "q.db"), "--listen", "0.0.0.0:0", "--auth-file", authFile)
	base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
	req := func(tok string) int {
		r, _ := http.NewRequest("POST", base+"/v1/jobs", strings.NewReader(`{"queue":"q"}`))
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := req(""); got != 401 {
		t.Errorf("enqueue without a token = %d, want 401", got)
	}
	if got := req(token + "x"); got != 401 {
		t.Errorf("enqueue with a wrong token = %d, want 401", got)
	}
	if got := req(token); got != 201 {
		t.Errorf("enqueue with alice's token = %d, want 201", got)
	}
}

// rawConn opens a TCP connection to base's host.
func rawConn(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server ends the connection (EOF, reset,
// or a response followed by EOF) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errorsAs(err, &ne) && ne.Timeout())
		}
	}
}

func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

func TestServerLimits(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "q.db"), "--listen", "127.0.0.1:0",
		"--read-header-timeout", "300ms", "--read-timeout", "600ms", "--write-timeout", "700ms",
		"--idle-timeout", "300ms", "--max-header-bytes", "2048", "--max-body", "1000")

	t.Run("read header timeout", func(t *testing.T) {
		c := rawConn(t, base)
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")) // headers never end
		if !closedWithin(c, 3*time.Second) {
			t.Fatal("a connection that never finished its headers was kept open")
		}
	})
	t.Run("read timeout", func(t *testing.T) {
		c := rawConn(t, base)
		c.Write([]byte("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"qu")) // body never ends
		if !closedWithin(c, 3*time.Second) {
			t.Fatal("a connection that never finished its body was kept open")
		}
	})
	t.Run("idle timeout", func(t *testing.T) {
		c := rawConn(t, base)
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("healthz = %v, %v", res, err)
		}
		if !closedWithin(c, 3*time.Second) {
			t.Fatal("an idle keep-alive connection was kept open past the idle timeout")
		}
	})
	t.Run("long-poll waits are cut to fit the write timeout", func(t *testing.T) {
		start := time.Now()
		res, err := http.Post(base+"/v1/claim", "application/json", strings.NewReader(`{"worker":"w","queues":["none"],"wait_ms":5000}`))
		if err != nil {
			t.Fatalf("a long-poll beyond the write timeout broke the connection: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != 204 || time.Since(start) > 3*time.Second {
			t.Fatalf("long-poll = %d after %v, want 204 within the 700 ms write timeout", res.StatusCode, time.Since(start))
		}
	})
	t.Run("header size", func(t *testing.T) {
		r, _ := http.NewRequest("GET", base+"/healthz", nil)
		r.Header.Set("X-Big", strings.Repeat("a", 32<<10))
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("32 KiB of headers = %d, want 431", res.StatusCode)
		}
	})
	t.Run("body size", func(t *testing.T) {
		status, body := call(t, "POST", base+"/v1/jobs", `{"queue":"q","payload":"`+strings.Repeat("a", 2000)+`"}`)
		if status != 413 || errorCode(body) != "resource_exhausted" {
			t.Fatalf("a 2 KB body under a 1000 B limit = %d %v, want 413 resource_exhausted", status, body)
		}
	})
}

func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSignedCert(t, dir)
	p := start(t, nil, "serve", "--db", filepath.Join(dir, "q.db"), "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	re := regexp.MustCompile(`listen=https://(\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no https listen line; stderr:\n%s", p.stderr)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	res, err := client.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET over TLS: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil {
		t.Fatalf("GET over TLS = %d, tls %v", res.StatusCode, res.TLS != nil)
	}
	if res, err := http.Get("http://" + addr + "/healthz"); err == nil && res.StatusCode == 200 {
		t.Fatal("plain HTTP was served on the TLS port")
	}
	if code, _, stderr := runFenceq(t, nil, "serve", "--db", filepath.Join(dir, "x.db"), "--tls-cert", certFile); code != 2 {
		t.Fatalf("--tls-cert without --tls-key = exit %d %s, want 2", code, stderr)
	}
}

func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fenceq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestAuditVerifyOfflineNamesTheBrokenSequence runs a mixed workload through
// the server, verifies the chain while it runs (on a copy) and after a
// restart, then flips one byte of one stored audit record in a copy of the
// file: "fenceq audit verify" must name that sequence.
func TestAuditVerifyOfflineNamesTheBrokenSequence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.db")
	p, base := startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")
	for i := 0; i < 5; i++ {
		call(t, "POST", base+"/v1/jobs", `{"queue":"q"}`)
	}
	_, job := call(t, "POST", base+"/v1/claim", `{"worker":"w","queues":["q"]}`)
	call(t, "POST", base+"/v1/jobs/"+jsonID(job)+"/complete", `{"worker":"w","attestation":{"sig":"abc"}}`)
	_, job = call(t, "POST", base+"/v1/claim", `{"worker":"w","queues":["q"]}`)
	call(t, "POST", base+"/v1/jobs/"+jsonID(job)+"/fail", `{"worker":"w","error":"boom","final":true}`)
	call(t, "POST", base+"/v1/jobs/"+jsonID(job)+"/retry", ``)

	code, out, stderr := runFenceq(t, nil, "audit", "verify", "--db", path)
	if code != 0 || !strings.HasPrefix(out, "ok: 10 records") || !strings.Contains(stderr, "copy") {
		t.Fatalf("audit verify while serving = exit %d, %q, %q; want ok on a copy with 10 records", code, out, stderr)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	if code, out, _ := runFenceq(t, nil, "audit", "verify", "--db", path); code != 0 || !strings.HasPrefix(out, "ok: 10 records") {
		t.Fatalf("audit verify after restart = exit %d, %q", code, out)
	}

	broken := filepath.Join(dir, "broken.db")
	raw, _ := os.ReadFile(path)
	os.WriteFile(broken, raw, 0o600)
	bdb, err := bbolt.Open(broken, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("audit"))
		k := make([]byte, 8)
		k[7] = 7
		v := append([]byte(nil), b.Get(k)...)
		i := strings.Index(string(v), "local")
		v[i] ^= 0x01 // "local" → "mocal": one bit of the principal
		return b.Put(k, v)
	})
	bdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = runFenceq(t, nil, "audit", "verify", "--db", broken, "--json")
	if code != 1 || !strings.Contains(out, `"first_broken": 7`) || !strings.Contains(out, `"ok": false`) {
		t.Fatalf("audit verify of the flipped copy = exit %d, %s; want exit 1 naming sequence 7", code, out)
	}
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep, _ := s.VerifyAudit(context.Background()); !rep.OK {
		t.Fatalf("the original file no longer verifies: %+v", rep)
	}
}

func jsonID(job map[string]any) string {
	id, _ := job["id"].(float64)
	return big.NewInt(int64(id)).String()
}
