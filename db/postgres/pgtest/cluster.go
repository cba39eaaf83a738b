//go:build linux

package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a PostgreSQL server of one test's own (initdb in a temporary
// directory, started on a free port), for tests that do to the server what
// must not hit other tests' databases: stop it (SIGSTOP) and resume it.
// It is started as the postgres user when the test runs as root
// (PostgreSQL refuses root), and stopped
// and removed when the test ends.
type Cluster struct {
	tb   testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// NewCluster starts a cluster. Like the other PostgreSQL tests it skips
// without EnvURL (fails under CI=true); with it, a missing PostgreSQL
// server binary fails the test.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	ServerURL(tb)
	bin, err := ServerBin()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	// Not t.TempDir(): its directories are 0700 root, which the postgres
	// user cannot pass through.
	dir, err := os.MkdirTemp("", "fenceq-pgtest-")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{tb: tb, dir: dir, done: make(chan struct{})}
	tb.Cleanup(c.stop)
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		uid, gid, err := PostgresUser()
		if err != nil {
			tb.Fatalf("pgtest: running as root needs the postgres user: %v", err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	as := func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + dir}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
	as(initdb)
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	log, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer log.Close()
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(c.port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100", "-c", "shared_buffers=16MB")
	as(c.cmd)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		tb.Fatalf("pgtest: start postgres: %v", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	for deadline := time.Now().Add(60 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return c
		}
		select {
		case <-c.done:
			b, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			tb.Fatalf("pgtest: postgres exited before it answered; its log:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgtest: postgres did not answer within 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ServerBin is the directory of the newest PostgreSQL server installed
// from Debian's packages (initdb, postgres).
func ServerBin() (string, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		return "", fmt.Errorf("no /usr/lib/postgresql/*/bin/postgres (.ci/postgres.sh installs postgresql-15)")
	}
	return filepath.Dir(bins[len(bins)-1]), nil
}

// PostgresUser is the postgres user's uid and gid: a test that runs as
// root runs the server as that user (PostgreSQL refuses root).
func PostgresUser() (uid, gid int, err error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, err
	}
	if uid, err = strconv.Atoi(u.Uid); err == nil {
		gid, err = strconv.Atoi(u.Gid)
	}
	return uid, gid, err
}

// URL is the cluster's database "postgres", as its superuser.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Stop stops every process of the server (SIGSTOP): connections stay open
// and nothing answers, as a hung database or host does. Cont resumes it;
// the cleanup resumes it too.
func (c *Cluster) Stop() { c.signal(syscall.SIGSTOP) }

// Cont resumes a stopped server (SIGCONT).
func (c *Cluster) Cont() { c.signal(syscall.SIGCONT) }

// signal sends sig to the postmaster and each of its children (they are
// not in its process group: PostgreSQL's children call setsid), the
// postmaster first, so that it forks no new backend meanwhile.
func (c *Cluster) signal(sig syscall.Signal) {
	c.tb.Helper()
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		c.tb.Fatalf("pgtest: %v to the postmaster: %v", sig, err)
	}
	for _, child := range children(pid) {
		_ = syscall.Kill(child, sig)
	}
}

// children are the processes whose parent is pid, from /proc.
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if n, err := strconv.Atoi(filepath.Base(filepath.Dir(st))); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// stop resumes the server, shuts it down (fast: SIGINT; SIGKILL after 10
// s) and removes its directory.
func (c *Cluster) stop() {
	if c.cmd != nil && c.cmd.Process != nil {
		pid := c.cmd.Process.Pid
		kids := children(pid)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGCONT)
		}
		_ = syscall.Kill(pid, syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			for _, k := range append(kids, pid) {
				_ = syscall.Kill(k, syscall.SIGKILL)
			}
			<-c.done
		}
	}
	os.RemoveAll(c.dir)
}
