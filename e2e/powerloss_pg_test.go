//go:build linux

package e2e

// The power-loss test on PostgreSQL (long form only): a PostgreSQL
// cluster's data directory on a lazyfs mount, two fenceq replicas on it,
// PostgreSQL and fenceq cut together. docs/powerloss.md has the figures.
//
//	FENCEQ_POWERLOSS_PG=1 FENCEQ_POWERLOSS_CYCLES=10 go test -run TestPowerLossPostgres -v ./e2e

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
	"github.com/fenceq/fenceq/internal/lazyfs"
)

// pgCluster is a PostgreSQL server run as the postgres user on a data
// directory, started and killed by the test.
type pgCluster struct {
	t        *testing.T
	bin      string // the directory of initdb and postgres
	uid, gid int
	data     string
	sock     string
	port     int
	logPath  string
	settings []string // the controls' settings, after the test's own
	cmd      *exec.Cmd
	done     chan struct{}
}

func (c *pgCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// asPostgres runs cmd as the postgres user (PostgreSQL refuses root) in a
// process group of its own, so that the postmaster and every backend can
// be killed at once, as a power cut stops them.
func (c *pgCluster) asPostgres(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true,
		Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid), NoSetGroups: true}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + filepath.Dir(c.data)}
}

// initdb creates the cluster in dir (owned by postgres, mode 0700).
func (c *pgCluster) initdb(dir string) {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, "initdb"), "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
	c.asPostgres(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("initdb: %v\n%s", err, out)
	}
}

// start starts the server and waits until it answers (after crash
// recovery, when the last stop was a cut); an error is a server that
// exited or did not answer, with the end of its log.
func (c *pgCluster) start() error {
	log, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "---- start %s\n", time.Now().Format(time.RFC3339Nano))
	// fsync on, full-page writes on (the defaults, said out loud: they are
	// what the test is about); frequent checkpoints so that cuts land in
	// data-file syncs too, not only in WAL flushes.
	args := []string{"-D", c.data, "-p", strconv.Itoa(c.port), "-k", c.sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "full_page_writes=on", "-c", "synchronous_commit=on",
		"-c", "max_connections=100", "-c", "shared_buffers=16MB", "-c", "checkpoint_timeout=30s", "-c", "max_wal_size=64MB"}
	for _, kv := range c.settings {
		args = append(args, "-c", kv) // the last -c of a name wins
	}
	c.cmd = exec.Command(filepath.Join(c.bin, "postgres"), args...)
	c.asPostgres(c.cmd)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		c.cmd = nil
		return fmt.Errorf("start postgres: %w", err)
	}
	c.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(c.cmd, c.done)
	deadline := time.Now().Add(120 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.url())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("postgres exited before it answered; its log:\n%s", c.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not answer within 120s (%v); its log:\n%s", err, c.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill sends SIGKILL to the postmaster and every backend and waits until
// all are gone: nothing of the server survives to write after the cut.
func (c *pgCluster) kill() {
	c.t.Helper()
	if c.cmd == nil {
		return
	}
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-c.done
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(-pgid, 0) == nil; {
		if time.Now().After(deadline) {
			c.t.Fatalf("postgres processes of group %d still alive 10s after SIGKILL", pgid)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
	c.cmd = nil
}

// logTail is the end of the server's log.
func (c *pgCluster) logTail() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b[max(0, len(b)-3000):])
}

// logSince is the log from offset on.
func (c *pgCluster) logSince(off int64) string {
	b, _ := os.ReadFile(c.logPath)
	if off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

func (c *pgCluster) logSize() int64 {
	st, err := os.Stat(c.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

func skipUnlessPGPower(t *testing.T) {
	if os.Getenv("FENCEQ_POWERLOSS_PG") != "1" {
		t.Skip("long form only: FENCEQ_POWERLOSS_PG=1 runs it (FENCEQ_POWERLOSS_CYCLES=N cuts, default 5), as root with /dev/fuse, fusermount3 and PostgreSQL's server (.ci/postgres.sh installs postgresql-15)")
	}
}

// pgPowerSetup skips unless the long form is asked for (also under
// CI=true: it is a documented long form, not CI's), and fails when it is
// asked for but cannot run.
func pgPowerSetup(t *testing.T) *pgCluster {
	skipUnlessPGPower(t)
	if os.Geteuid() != 0 {
		t.Fatal("FENCEQ_POWERLOSS_PG=1: run as root (the mount is served as root, PostgreSQL as the postgres user)")
	}
	bin, err := pgtest.ServerBin()
	if err != nil {
		t.Fatalf("FENCEQ_POWERLOSS_PG=1: %v", err)
	}
	uid, gid, err := pgtest.PostgresUser()
	if err != nil {
		t.Fatalf("FENCEQ_POWERLOSS_PG=1: %v", err)
	}
	// Not t.TempDir(): its directories are 0700 root, which the postgres
	// user cannot pass through.
	base, err := os.MkdirTemp("", "fenceq-powerpg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c := &pgCluster{t: t, bin: bin, uid: uid, gid: gid, port: port,
		sock: filepath.Join(base, "sock"), logPath: filepath.Join(base, "postgres.log")}
	for _, d := range []string{"backing", "mnt", "sock"} {
		p := filepath.Join(base, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// pgFileKind names what a path of the data directory (relative to the
// mount) is, for the figures.
func pgFileKind(rel string) string {
	switch {
	case strings.HasPrefix(rel, "data/pg_wal/0"):
		return "a WAL segment"
	case rel == "data/global/pg_control":
		return "pg_control"
	case strings.HasPrefix(rel, "data/base/") || strings.HasPrefix(rel, "data/global/"):
		return "a data file"
	}
	return rel
}

// pgPowerRig is the cluster on its mount and the fenceq replicas on it.
type pgPowerRig struct {
	t       *testing.T
	pg      *pgCluster
	backing string
	mnt     string
	seeds   *mrand.Rand
	fs      *lazyfs.FS
	srvs    []*crashServer
	acks    *powerAcks
}

// newPGPowerRig creates the cluster (initdb writes to the backing
// directory itself: what it leaves is synced by initdb and never cut;
// everything after goes through the mount), mounts, starts PostgreSQL and
// two replicas.
func newPGPowerRig(t *testing.T, settings ...string) *pgPowerRig {
	pg := pgPowerSetup(t)
	pg.settings = settings
	base := filepath.Dir(pg.sock)
	r := &pgPowerRig{t: t, pg: pg, backing: filepath.Join(base, "backing"), mnt: filepath.Join(base, "mnt"),
		seeds: mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 21)), acks: newPowerAcks()}
	pg.initdb(filepath.Join(r.backing, "data"))
	pg.data = filepath.Join(r.mnt, "data")
	// Cleanups run last first: the replicas (start's), then postgres,
	// then the mount, also when the test fails.
	t.Cleanup(r.unmount)
	t.Cleanup(pg.kill)
	r.mount()
	if err := pg.start(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r.srvs = append(r.srvs, &crashServer{t: t, path: pg.url(), listen: "127.0.0.1:0", client: newCrashClient()})
	}
	r.upReplicas()
	return r
}

func (r *pgPowerRig) mount() {
	r.t.Helper()
	var err error
	// allow_other: the daemon is root, PostgreSQL the postgres user.
	r.fs, err = lazyfs.MountWith(r.backing, r.mnt, r.seeds.Uint64(), lazyfs.Options{AllowOther: true})
	if err != nil {
		r.t.Fatalf("lazyfs.MountWith: %v", err)
	}
}

func (r *pgPowerRig) unmount() {
	if r.fs == nil {
		return
	}
	if err := r.fs.Unmount(); err != nil {
		r.t.Errorf("unmount: %v", err)
	}
	r.fs = nil
}

func (r *pgPowerRig) upReplicas() {
	for _, s := range r.srvs {
		s.startEnv(nil)
	}
}

// checkpoint asks for a checkpoint in the background, so that a cut may
// land among the data files' syncs, not only in a WAL flush. Its error
// (the cut) does not matter.
func (r *pgPowerRig) checkpoint() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, r.pg.url())
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "CHECKPOINT")
	}()
}

// restart is the power coming back: the replicas and every PostgreSQL
// process killed (they run on a dead disk), the mount unmounted (no page
// cache survives) and mounted again, PostgreSQL started (crash recovery
// from its WAL); the replicas are not started yet. An error is a
// PostgreSQL that did not come back.
func (r *pgPowerRig) restart() error {
	for _, s := range r.srvs {
		s.killAfterCut()
	}
	r.pg.kill()
	r.unmount()
	r.mount()
	return r.pg.start()
}

// check is checkPowerAcks for the cluster: fenceq audit verify --db, the
// store's Check(), and every acknowledged thing by payload.
func (r *pgPowerRig) check(when string) *powerCheck {
	t := r.t
	t.Helper()
	pc := &powerCheck{states: map[db.State]int{}}
	if code, stdout, stderr := runFenceq(t, nil, "audit", "verify", "--db", r.pg.url()); code != 0 {
		pc.lostf("%s: fenceq audit verify --db: exit %d: %s%s", when, code, stdout, stderr)
		return pc
	}
	s, err := postgres.Open(context.Background(), r.pg.url(), postgres.Options{})
	if err != nil {
		pc.lostf("%s: postgres.Open: %v", when, err)
		return pc
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		pc.lostf("%s: Check(): %v", when, err)
		return pc
	}
	r.acks.mu.Lock()
	defer r.acks.mu.Unlock()
	checkPowerStore(pc, s, r.acks)
	return pc
}

func (r *pgPowerRig) counts() (enqueued, completed int) {
	r.acks.mu.Lock()
	defer r.acks.mu.Unlock()
	return len(r.acks.enqueued), len(r.acks.completed)
}

// TestPowerLossPostgres_ACutOfPostgresAndFenceqLosesNothingAcknowledged:
// PostgreSQL's data directory is on a lazyfs mount; two fenceq replicas
// serve it under producers, workers and lease takers over HTTP; the power
// is cut (inside the n-th sync from now, plain or torn; half the time
// while a checkpoint runs) while both run; both are killed, the mount
// unmounted and mounted again, PostgreSQL restarted (it recovers from its
// WAL) and every acknowledged thing checked before the replicas restart.
func TestPowerLossPostgres_ACutOfPostgresAndFenceqLosesNothingAcknowledged(t *testing.T) {
	cycles := powerCycles(t)
	started := time.Now()
	r := newPGPowerRig(t)
	stop := runLoadOn([]*crashClient{r.srvs[0].client, r.srvs[1].client}, r.acks, randomHex(t, 4))
	defer stop()

	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 22))
	var inSync, tornCuts, tornWrites, dropped, partial, pending, undone, syncs, dirSyncs, checkpoints int
	cutIn := map[string]int{} // where the cuts landed: the WAL, a data file, a directory, ...
	for i := range cycles {
		torn := rng.IntN(2) == 0
		// Let the load run a moment, then arm a cut inside one of the next
		// syncs (every commit flushes the WAL, so they come quickly).
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		if rng.IntN(2) == 0 {
			// A checkpoint, and the cut inside one of its syncs of the
			// data files, pg_control and the SLRUs (not the WAL's, which
			// the commits make all the time): where full-page writes
			// and the checkpoint's ordering are tried.
			checkpoints++
			r.fs.CutAtSyncOf(1+rng.IntN(30), torn, func(rel string) bool { return !strings.HasPrefix(rel, "data/pg_wal") })
			r.checkpoint()
		} else {
			r.fs.CutAtSync(1+rng.IntN(400), torn)
		}
		select {
		case <-r.fs.Done():
		case <-time.After(20 * time.Second):
			r.fs.Cut(torn)
		}
		rep := r.fs.Report()
		st := r.fs.Stats()
		logFrom := r.pg.logSize()
		if err := r.restart(); err != nil {
			t.Fatalf("cycle %d: PostgreSQL did not come back after the cut (%+v): %v", i+1, rep, err)
		}
		pc := r.check(fmt.Sprintf("cycle %d", i+1))
		enq, done := r.counts()
		t.Logf("cycle %d: after %d file syncs and %d directory syncs, cut in a sync %v (of %s), torn %v: %d unsynced writes (%d bytes), %d dropped, %d in part, %d whole; "+
			"%d directory changes undone; so far %d enqueues and %d completions acknowledged; jobs %v",
			i+1, st.Syncs, st.DirSyncs, rep.InSync, rep.SyncOf, rep.Torn, rep.PendingWrites, rep.PendingBytes, rep.Dropped, rep.Partial, rep.Whole,
			rep.UndoneDirOps, enq, done, pc.states)
		if len(pc.losses) > 0 {
			t.Fatalf("cycle %d lost acknowledged work:\n%s\npostgres log since the cut:\n%s", i+1, strings.Join(pc.losses, "\n"), r.pg.logSince(logFrom))
		}
		if rep.InSync {
			inSync++
			cutIn[pgFileKind(rep.SyncOf)]++
		}
		if rep.Torn {
			tornCuts++
		}
		if rep.Partial > 0 {
			tornWrites++
		}
		dropped += rep.Dropped
		partial += rep.Partial
		pending += rep.PendingWrites
		undone += rep.UndoneDirOps
		syncs += st.Syncs
		dirSyncs += st.DirSyncs
		r.upReplicas()
	}
	stop()

	// Drain through one replica, stop both, and check once more.
	time.Sleep(crashLease + 100*time.Millisecond)
	drained := r.srvs[0].drain("power")
	r.srvs[1].kill()
	final := r.check("after the drain")
	if len(final.losses) > 0 {
		t.Fatalf("after the drain:\n%s", strings.Join(final.losses, "\n"))
	}
	wantAllCompleted(t, final.states)
	acks := r.acks
	acks.mu.Lock()
	defer acks.mu.Unlock()
	for _, b := range acks.bad {
		t.Errorf("unexpected answer: %s", b)
	}
	if len(acks.enqueued) == 0 || len(acks.completed) == 0 {
		t.Fatalf("the load did nothing: %d enqueues and %d completions acknowledged", len(acks.enqueued), len(acks.completed))
	}
	if pending == 0 {
		t.Fatalf("no cut found an unsynced write: the test could not have caught a missing sync")
	}
	tokens := 0
	for _, m := range acks.tokens {
		tokens += len(m)
	}
	log := r.pg.logSince(0)
	recoveries := strings.Count(log, "automatic recovery in progress")
	t.Logf("power loss on PostgreSQL: %d cuts in %v (%d inside a sync, %d torn, %d with a write kept in part, %d with a checkpoint asked for); %d file syncs and %d directory syncs through the mount; "+
		"cuts in the sync of %v; %d unsynced writes at the cuts, %d dropped (%.1f per cut), %d kept in part, %d directory changes undone; %d crash recoveries in PostgreSQL's log; "+
		"%d jobs drained; %d enqueues and %d completions acknowledged, %d lease tokens handed out; none lost, none completed twice, no token twice",
		cycles, time.Since(started).Round(time.Second), inSync, tornCuts, tornWrites, checkpoints, syncs, dirSyncs, cutIn, pending, dropped, float64(dropped)/float64(cycles), partial, undone,
		recoveries, drained, len(acks.enqueued), len(acks.completed), tokens)
	// What PostgreSQL complained of, other than the dead disk: a
	// filesystem call the mount does not support would show here.
	var other []string
	for _, line := range strings.Split(log, "\n") {
		if (strings.Contains(line, "ERROR:") || strings.Contains(line, "WARNING:") || strings.Contains(line, "PANIC:")) &&
			!strings.Contains(line, "Input/output error") && len(other) < 20 {
			other = append(other, line)
		}
	}
	t.Logf("PostgreSQL's errors and warnings other than the cut's I/O errors: %d%s", len(other), strings.Join(append([]string{""}, other...), "\n"))
	if recoveries < cycles {
		t.Errorf("PostgreSQL's log shows %d crash recoveries for %d cuts", recoveries, cycles)
	}
}

// TestPowerLossPostgres_ControlsLoseAcknowledgedWrites are the controls:
// the same rig with PostgreSQL acknowledging commits before they are
// durable must lose acknowledged work after a cut (or not come back at
// all), or the test above proves nothing. synchronous_commit=off
// acknowledges a commit before its WAL is flushed (the WAL writer flushes
// it a moment later): the cut lands inside one of those flushes.
// fsync=off never syncs at all: the cut comes at a moment.
func TestPowerLossPostgres_ControlsLoseAcknowledgedWrites(t *testing.T) {
	skipUnlessPGPower(t)
	for _, setting := range []string{"synchronous_commit=off", "fsync=off"} {
		t.Run(setting, func(t *testing.T) {
			cycles := powerCycles(t)
			r := newPGPowerRig(t, setting)
			stop := runLoadOn([]*crashClient{r.srvs[0].client, r.srvs[1].client}, r.acks, randomHex(t, 4))
			defer stop()
			rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 23))
			for i := range cycles {
				torn := rng.IntN(2) == 0
				wait := time.Duration(300+rng.IntN(1500)) * time.Millisecond
				if setting == "fsync=off" {
					time.Sleep(wait)
					r.fs.Cut(torn)
				} else {
					time.Sleep(wait)
					r.fs.CutAtSync(1+rng.IntN(20), torn)
					select {
					case <-r.fs.Done():
					case <-time.After(20 * time.Second):
						r.fs.Cut(torn)
					}
				}
				rep, st := r.fs.Report(), r.fs.Stats()
				enq, done := r.counts()
				if err := r.restart(); err != nil {
					t.Logf("%s control: cycle %d (cut in a sync %v, torn %v, %d syncs, %d unsynced writes, %d dropped) with %d enqueues and %d completions acknowledged: PostgreSQL did not come back: %v",
						setting, i+1, rep.InSync, rep.Torn, st.Syncs, rep.PendingWrites, rep.Dropped, enq, done, err)
					return
				}
				if pc := r.check(fmt.Sprintf("cycle %d", i+1)); len(pc.losses) > 0 {
					t.Logf("%s control: cycle %d (cut in a sync %v, torn %v, %d syncs, %d unsynced writes, %d dropped) with %d enqueues and %d completions acknowledged lost:\n%s",
						setting, i+1, rep.InSync, rep.Torn, st.Syncs, rep.PendingWrites, rep.Dropped, enq, done, strings.Join(pc.losses, "\n"))
					return
				}
				t.Logf("%s control: cycle %d lost nothing (cut in a sync %v, torn %v, %d unsynced writes)", setting, i+1, rep.InSync, rep.Torn, rep.PendingWrites)
				r.upReplicas()
			}
			t.Fatalf("the %s control lost nothing in %d cuts: the test cannot tell a durable commit from one acknowledged early", setting, cycles)
		})
	}
}
