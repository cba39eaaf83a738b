//go:build linux

package e2e

// Power-loss tests on the real binary: fenceq serves a file on a lazyfs
// mount (internal/lazyfs), which keeps unsynced writes in memory; the power
// is cut under load (often inside a sync, sometimes torn), the server
// killed, the mount unmounted, and fenceq restarted on what the backing
// directory kept. docs/powerloss.md has the figures and what the
// filesystem models.
//
// Short form (CI): 5 cycles. Long form:
//
//	FENCEQ_POWERLOSS_CYCLES=20 go test -run TestPowerLoss -v ./e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/internal/lazyfs"
)

// powerAcks is what the server acknowledged, keyed by payload: a job lost
// to a cut frees its id for the next enqueue, so an id proves nothing.
type powerAcks struct {
	mu        sync.Mutex
	enqueued  map[string]bool              // payload → answered 201
	completed map[string]crashCompletion   // payload → completion answered 200
	doubles   []string                     // a job whose completion was acknowledged twice
	tokens    map[string]map[uint64]string // lease name → token → the holder it was handed to
	leaseMax  map[string]uint64            // name → highest token an acquire was answered with
	leaseDup  []string                     // a lease token handed out twice
	bad       []string                     // answers no cut explains (malformed bodies)
}

func newPowerAcks() *powerAcks {
	return &powerAcks{enqueued: map[string]bool{}, completed: map[string]crashCompletion{},
		tokens: map[string]map[uint64]string{}, leaseMax: map[string]uint64{}}
}

func (a *powerAcks) badf(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bad) < 20 {
		a.bad = append(a.bad, fmt.Sprintf(format, args...))
	}
}

func (a *powerAcks) enqueueAcked(payloads []string, jobs []crashJob) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, j := range jobs {
		if string(j.Payload) != payloads[i] {
			a.bad = append(a.bad, fmt.Sprintf("enqueue of %s answered payload %s", payloads[i], j.Payload))
		}
		a.enqueued[payloads[i]] = true
	}
}

func (a *powerAcks) completeAcked(job crashJob, result string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := string(job.Payload)
	if prev, ok := a.completed[p]; ok {
		a.doubles = append(a.doubles, fmt.Sprintf("job %s: completed with token %d, then again with token %d", p, prev.token, job.FencingToken))
	}
	a.completed[p] = crashCompletion{token: job.FencingToken, result: result}
}

// serverErrorsExpected: between a cut and the kill, every commit fails.
func (a *powerAcks) serverErrorsExpected() bool { return true }

// powerLeaser takes named leases (short, sometimes released) and records
// every token it was handed.
func powerLeaser(c *crashClient, acks *powerAcks, holder string, names []string, stop <-chan struct{}) {
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 13))
	for {
		select {
		case <-stop:
			return
		default:
		}
		name := names[rng.IntN(len(names))]
		path := "/v1/leases/" + url.PathEscape(name)
		status, raw, err := c.do("POST", path+"/acquire", fmt.Sprintf(`{"holder":%q,"ttl_ms":50}`, holder))
		if err != nil || status != http.StatusOK {
			time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
			continue
		}
		var l struct {
			FencingToken uint64 `json:"fencing_token"`
		}
		if json.Unmarshal(raw, &l) != nil || l.FencingToken == 0 {
			acks.badf("acquire: %s", raw)
			continue
		}
		acks.mu.Lock()
		if acks.tokens[name] == nil {
			acks.tokens[name] = map[uint64]string{}
		}
		if prev, ok := acks.tokens[name][l.FencingToken]; ok {
			acks.leaseDup = append(acks.leaseDup, fmt.Sprintf("lease %s: token %d handed to %s, then to %s", name, l.FencingToken, prev, holder))
		}
		acks.tokens[name][l.FencingToken] = holder
		acks.leaseMax[name] = max(acks.leaseMax[name], l.FencingToken)
		acks.mu.Unlock()
		if rng.IntN(2) == 0 {
			c.do("POST", path+"/release", fmt.Sprintf(`{"holder":%q,"fencing_token":%d}`, holder, l.FencingToken))
		}
	}
}

// powerCheck opens what the backing directory kept (no server, no mount)
// and lists every acknowledged thing it lost. counts are the jobs by state.
type powerCheck struct {
	losses []string
	states map[db.State]int
}

func (pc *powerCheck) lostf(format string, args ...any) {
	if len(pc.losses) < 30 {
		pc.losses = append(pc.losses, fmt.Sprintf(format, args...))
	}
}

func checkPowerAcks(t *testing.T, path string, acks *powerAcks) *powerCheck {
	t.Helper()
	pc := &powerCheck{states: map[db.State]int{}}
	acks.mu.Lock()
	defer acks.mu.Unlock()
	if _, err := os.Stat(path); err != nil {
		if len(acks.enqueued) > 0 {
			pc.lostf("the database file is gone (%v) with %d enqueues acknowledged", err, len(acks.enqueued))
		}
		return pc
	}
	// The binary opens the file first: bbolt rebuilds the freelist of a
	// file it opens (NoFreelistSync) in a goroutine that panics on a
	// broken page tree, which would take this test process down with it.
	if code, stdout, stderr := runFenceq(t, nil, "audit", "verify", "--db", path); code != 0 {
		if len(stderr) > 300 {
			stderr = stderr[:300] + "..."
		}
		pc.lostf("fenceq audit verify --db: exit %d: %s%s", code, stdout, stderr)
		return pc
	}
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		pc.lostf("bolt.Open: %v", err)
		return pc
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		pc.lostf("Check(): %v", err)
		return pc
	}
	checkPowerStore(pc, s, acks)
	return pc
}

// checkPowerStore is the part of checkPowerAcks for a store of any engine,
// opened and checked: acknowledged jobs by payload, completions, leases.
// acks.mu is held.
func checkPowerStore(pc *powerCheck, s db.Store, acks *powerAcks) {
	ctx := context.Background()
	byPayload := map[string][]db.Job{}
	for after := uint64(0); ; {
		page, err := s.ListJobs(ctx, db.ListRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			pc.lostf("ListJobs: %v", err)
			return
		}
		for _, j := range page.Jobs {
			pc.states[j.State]++
			byPayload[string(j.Payload)] = append(byPayload[string(j.Payload)], j)
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	missing := 0
	for p := range acks.enqueued {
		switch js := byPayload[p]; len(js) {
		case 0:
			if missing++; missing <= 10 {
				pc.lostf("acknowledged enqueue of %s is gone", p)
			}
		case 1:
		default:
			pc.lostf("acknowledged enqueue of %s is there %d times", p, len(js))
		}
	}
	if missing > 10 {
		pc.lostf("... %d of %d acknowledged enqueues are gone", missing, len(acks.enqueued))
	}
	lostDone := 0
	for p, c := range acks.completed {
		js := byPayload[p]
		if len(js) != 1 {
			continue // counted above
		}
		j := js[0]
		if j.State != db.StateCompleted || string(j.Result) != c.result || j.Attempts != c.token {
			if lostDone++; lostDone <= 10 {
				pc.lostf("job %s: completion with token %d was acknowledged, but it is %s (attempts %d) with result %s", p, c.token, j.State, j.Attempts, j.Result)
			}
		}
	}
	if lostDone > 10 {
		pc.lostf("... %d of %d acknowledged completions are lost", lostDone, len(acks.completed))
	}
	for name, tok := range acks.leaseMax {
		l, err := s.GetLease(ctx, name)
		if err != nil || l.FencingToken < tok {
			pc.lostf("lease %s: token %d was handed out, the file has %d (%v): the next acquire would hand it out again", name, tok, l.FencingToken, err)
		}
	}
	pc.losses = append(pc.losses, acks.doubles...)
	pc.losses = append(pc.losses, acks.leaseDup...)
}

// powerCycles is the number of cuts: 5 by default (CI's short form),
// FENCEQ_POWERLOSS_CYCLES for the long form.
func powerCycles(t *testing.T) int {
	v := os.Getenv("FENCEQ_POWERLOSS_CYCLES")
	if v == "" {
		return 5
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FENCEQ_POWERLOSS_CYCLES=%q: want a positive number", v)
	}
	return n
}

// powerRig is a backing directory, the mount over it, and the server on
// the mount.
type powerRig struct {
	t          *testing.T
	backing    string
	mnt        string
	env        []string
	fs         *lazyfs.FS
	srv        *crashServer
	cycleSeeds *mrand.Rand
}

func newPowerRig(t *testing.T, env []string) *powerRig {
	dir := t.TempDir()
	r := &powerRig{t: t, backing: filepath.Join(dir, "backing"), mnt: filepath.Join(dir, "mnt"), env: env,
		cycleSeeds: mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 14))}
	for _, d := range []string{r.backing, r.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.srv = &crashServer{t: t, path: filepath.Join(r.mnt, "fenceq.db"), listen: "127.0.0.1:0", client: newCrashClient()}
	return r
}

// mountLazy mounts a lazyfs over backing at mnt; it skips without FUSE,
// except under CI=true. The caller unmounts.
func mountLazy(t *testing.T, backing, mnt string, seed uint64) *lazyfs.FS {
	t.Helper()
	l, err := lazyfs.Mount(backing, mnt, seed)
	if errors.Is(err, lazyfs.ErrNoFUSE) && os.Getenv("CI") != "true" {
		t.Skipf("no FUSE here (%v); .ci/power.sh installs fuse3", err)
	}
	if err != nil {
		t.Fatalf("lazyfs.Mount: %v", err)
	}
	return l
}

// up mounts a fresh lazyfs over the backing directory and starts fenceq
// on it.
func (r *powerRig) up() {
	r.t.Helper()
	r.fs = mountLazy(r.t, r.backing, r.mnt, r.cycleSeeds.Uint64())
	// Registered before the server's kill, so it runs after it: the
	// mount is never left behind, also when the test fails.
	r.t.Cleanup(r.unmount)
	r.srv.startEnv(r.env)
}

func (r *powerRig) unmount() {
	if r.fs == nil {
		return
	}
	if err := r.fs.Unmount(); err != nil {
		r.t.Errorf("unmount: %v", err)
	}
	r.fs = nil
}

// startEnv is start with the environment env.
func (s *crashServer) startEnv(env []string) {
	s.t.Helper()
	args := func() []string { return []string{"serve", "--db", s.path, "--listen", s.listen, "--max-lease", "1m"} }
	p := start(s.t, env, args()...)
	base := p.addrOrEmpty()
	if base == "" && s.listen != "127.0.0.1:0" {
		s.listen = "127.0.0.1:0"
		p = start(s.t, env, args()...)
		base = p.addrOrEmpty()
	}
	if base == "" {
		s.t.Fatalf("fenceq did not start on %s; stderr:\n%s", s.path, p.stderr)
	}
	s.listen = strings.TrimPrefix(base, "http://")
	s.proc = p
	s.client.base.Store(&base)
}

// killAfterCut is kill for a server whose disk has gone: it may have
// exited already (a read through its memory map fails after a cut, and
// the kernel sends SIGBUS). It returns what it said as it died then.
func (s *crashServer) killAfterCut() (diedAlone string) {
	s.t.Helper()
	empty := ""
	s.client.base.Store(&empty)
	err := s.proc.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.proc.done:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("fenceq did not die within 10s of SIGKILL")
	}
	if !errors.Is(err, os.ErrProcessDone) {
		if err != nil {
			s.t.Fatalf("SIGKILL: %v", err)
		}
		return ""
	}
	// Where a Go runtime crash starts, else the last lines.
	out := s.proc.stderr.String()
	from := max(0, len(out)-400)
	for _, m := range []string{"unexpected fault address", "fatal error:", "panic:"} {
		if i := strings.Index(out, m); i >= 0 {
			from = i
			break
		}
	}
	return out[from:min(len(out), from+400)]
}

// cycleResult is one cut and what the check found.
type cycleResult struct {
	report lazyfs.Report
	check  *powerCheck
	syncs  int // file syncs the mount completed
	// killedFirst: the server was killed before the cut, not after.
	killedFirst bool
	// diedAlone is the end of the server's stderr when it had exited
	// after the cut before it was killed.
	diedAlone string
	enqueued  int
	done      int
}

// cutOnce lets the load run, cuts the power (inside the n-th sync from now,
// always when inSync, or after a while), kills the server, unmounts and
// checks the backing file.
func (r *powerRig) cutOnce(acks *powerAcks, rng *mrand.Rand, inSync bool) cycleResult {
	t := r.t
	torn := rng.IntN(2) == 0
	killFirst := false
	// Most cuts land inside a sync, where the unsynced writes are; the
	// rest at a moment, and after a long wait when no sync comes (a
	// NoSync build hardly syncs). One in eight kills the server first and
	// cuts afterwards, to measure how little that finds.
	fallback := time.Duration(200+rng.IntN(1800)) * time.Millisecond
	switch k := rng.IntN(8); {
	case k < 6 || inSync:
		r.fs.CutAtSync(1+rng.IntN(1500), torn)
		fallback = 5 * time.Second
	case k == 6:
		killFirst = true
	}
	select {
	case <-r.fs.Done():
	case <-time.After(fallback):
		if killFirst {
			r.srv.kill()
		}
		r.fs.Cut(torn)
	}
	rep := r.fs.Report()
	syncs := r.fs.Stats().Syncs
	diedAlone := ""
	if !killFirst {
		diedAlone = r.srv.killAfterCut()
	}
	r.unmount()
	pc := checkPowerAcks(t, filepath.Join(r.backing, "fenceq.db"), acks)
	acks.mu.Lock()
	defer acks.mu.Unlock()
	return cycleResult{report: rep, check: pc, syncs: syncs, killedFirst: killFirst, diedAlone: diedAlone, enqueued: len(acks.enqueued), done: len(acks.completed)}
}

// runLoad starts the producers, workers (harness_test.go's) and lease
// takers; stop ends them.
func runLoad(c *crashClient, acks *powerAcks, run string) (stop func()) {
	return runLoadOn([]*crashClient{c}, acks, run)
}

// runLoadOn is runLoad spread over the servers of clients, in turn.
func runLoadOn(cs []*crashClient, acks *powerAcks, run string) (stop func()) {
	ch := make(chan struct{})
	var wg sync.WaitGroup
	goLoad := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	st := &crashStats{}
	for i := range 2 {
		goLoad(func() { crashProducer(cs[i%len(cs)], acks, st, "power", fmt.Sprintf("%s-p%d", run, i), ch) })
	}
	// More workers than producers: harness_test.go's workers stall now and
	// then past their lease, and the cuts should find completions too.
	for i := range 8 {
		goLoad(func() { crashWorker(cs[i%len(cs)], acks, st, "power", fmt.Sprintf("w%d", i), ch) })
	}
	names := []string{"power/a", "power/b"}
	for i := range 2 {
		goLoad(func() { powerLeaser(cs[i%len(cs)], acks, fmt.Sprintf("h%d", i), names, ch) })
	}
	var once sync.Once
	return func() { once.Do(func() { close(ch); wg.Wait() }) }
}

func TestPowerLoss_ACutLosesNothingAcknowledged(t *testing.T) {
	cycles := powerCycles(t)
	started := time.Now()
	r := newPowerRig(t, nil)
	r.up()
	acks := newPowerAcks()
	stop := runLoad(r.srv.client, acks, randomHex(t, 4))
	defer stop()

	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 15))
	var inSync, tornCuts, tornWrites, tornMeta, dropped, partial, pending, undone int
	var killedFirst, pendingKilledFirst, pendingInSync int
	for i := range cycles {
		res := r.cutOnce(acks, rng, i == 0) // the first one surely finds unsynced writes
		rep := res.report
		t.Logf("cycle %d: after %d syncs, killed first %v, cut in a sync %v, torn %v: %d unsynced writes (%d bytes), %d dropped, %d in part, %d whole; "+
			"%d directory changes undone; so far %d enqueues and %d completions acknowledged; jobs %v",
			i+1, res.syncs, res.killedFirst, rep.InSync, rep.Torn, rep.PendingWrites, rep.PendingBytes, rep.Dropped, rep.Partial, rep.Whole,
			rep.UndoneDirOps, res.enqueued, res.done, res.check.states)
		if res.diedAlone != "" {
			// Dying of the cut is fine (an mmap read that fails is SIGBUS);
			// dying of anything else is a crash under load.
			if !strings.Contains(res.diedAlone, "SIGBUS") && !strings.Contains(res.diedAlone, "input/output error") {
				t.Errorf("cycle %d: the server exited on its own, not of the cut's I/O errors:\n%s", i+1, res.diedAlone)
			}
			t.Logf("cycle %d: the server had exited after the cut:\n%s", i+1, res.diedAlone)
		}
		if len(res.check.losses) > 0 {
			t.Fatalf("cycle %d lost acknowledged work:\n%s", i+1, strings.Join(res.check.losses, "\n"))
		}
		if rep.InSync {
			inSync++
			pendingInSync += rep.PendingWrites
		}
		if rep.Torn {
			tornCuts++
		}
		if rep.Partial > 0 {
			tornWrites++
		}
		for _, off := range rep.PartialAt {
			if off < 2*4096 {
				tornMeta++ // one of bbolt's two meta pages (4 KiB pages here)
			}
		}
		dropped += rep.Dropped
		partial += rep.Partial
		pending += rep.PendingWrites
		undone += rep.UndoneDirOps
		if res.killedFirst {
			killedFirst++
			pendingKilledFirst += rep.PendingWrites
		}
		r.up()
	}
	stop()

	// The last file serves on: once every lease has run out, every job
	// that is not completed can be claimed and completed, and a clean
	// shutdown leaves a file with everything acknowledged in it.
	time.Sleep(crashLease + 100*time.Millisecond)
	drained := r.srv.drain("power")
	// A cut after the clean shutdown: what the drain was answered is synced.
	r.fs.Cut(false)
	r.unmount()
	final := checkPowerAcks(t, filepath.Join(r.backing, "fenceq.db"), acks)
	if len(final.losses) > 0 {
		t.Fatalf("after the drain:\n%s", strings.Join(final.losses, "\n"))
	}
	wantAllCompleted(t, final.states)

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
	t.Logf("power loss: %d cuts in %v (%d inside a sync, %d torn, %d with a write kept in part); %d unsynced writes at the cuts, %d dropped, %d kept in part "+
		"(%d of them a meta page; %.1f dropped per cut), %d directory changes undone; "+
		"cuts inside a sync found %d unsynced writes, %d cuts after a kill found %d; %d jobs drained after the last restart; %d enqueues and %d completions acknowledged, %d lease tokens handed out; "+
		"none lost, none completed twice, no token twice",
		cycles, time.Since(started).Round(time.Second), inSync, tornCuts, tornWrites, pending, dropped, partial, tornMeta,
		float64(dropped)/float64(cycles), undone, pendingInSync, killedFirst, pendingKilledFirst, drained, len(acks.enqueued), len(acks.completed), tokens)
}

// TestPowerLoss_NoSyncControlLosesAcknowledgedWrites is the control: the
// same cuts against a binary that commits without fdatasync
// (FENCEQ_TEST_NOSYNC=1) must lose acknowledged work, or the test above
// proves nothing. It stops at the first cut that loses something, so it
// runs in the short form too.
func TestPowerLoss_NoSyncControlLosesAcknowledgedWrites(t *testing.T) {
	cycles := powerCycles(t)
	r := newPowerRig(t, []string{"FENCEQ_TEST_NOSYNC=1"})
	r.up()
	acks := newPowerAcks()
	stop := runLoad(r.srv.client, acks, randomHex(t, 4))
	defer stop()
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 16))
	for i := range cycles {
		res := r.cutOnce(acks, rng, false)
		rep := res.report
		if len(res.check.losses) > 0 {
			t.Logf("NoSync control: cycle %d (cut in a sync %v, torn %v, %d unsynced writes, %d dropped) with %d enqueues and %d completions acknowledged lost:\n%s",
				i+1, rep.InSync, rep.Torn, rep.PendingWrites, rep.Dropped, res.enqueued, res.done, strings.Join(res.check.losses, "\n"))
			return
		}
		r.up()
	}
	t.Fatalf("the NoSync control lost nothing in %d cuts: the power-loss test cannot tell a synced store from an unsynced one", cycles)
}

// TestPowerLoss_ANewDatabaseSurvivesACutAfterItsFirstAcknowledgedWrite: bbolt
// syncs a new file but not the directory that names it, so without
// fenceq's own directory sync a cut would take the whole file away.
func TestPowerLoss_ANewDatabaseSurvivesACutAfterItsFirstAcknowledgedWrite(t *testing.T) {
	r := newPowerRig(t, nil)
	r.up()
	acks := newPowerAcks()
	payload := `{"p":"first"}`
	status, raw, err := r.srv.client.do("POST", "/v1/jobs", `{"queue":"power","payload":`+payload+`}`)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("enqueue: %d %s %v", status, raw, err)
	}
	acks.enqueued[payload] = true
	rep := r.fs.Cut(false)
	r.srv.kill()
	r.unmount()
	if pc := checkPowerAcks(t, filepath.Join(r.backing, "fenceq.db"), acks); len(pc.losses) > 0 {
		t.Fatalf("after a cut (%+v) right after the first enqueue:\n%s", rep, strings.Join(pc.losses, "\n"))
	}
}

// TestPowerLoss_ABackupSurvivesACutRightAfterItIsWritten: fenceq backup
// writes FILE.partial, syncs it, renames it to FILE and syncs the
// directory; a cut right after the command returns must leave FILE.
func TestPowerLoss_ABackupSurvivesACutRightAfterItIsWritten(t *testing.T) {
	dir := t.TempDir()
	_, base := startServing(t, nil, "--db", filepath.Join(dir, "q.db"), "--listen", "127.0.0.1:0")
	env := []string{"FENCEQ_SERVER=" + base}
	mustRun(t, env, 0, "enqueue", "--payload", `{"n":1}`)
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := mountLazy(t, backing, mnt, 1)
	t.Cleanup(func() { l.Unmount() })
	mustRun(t, env, 0, "backup", "--out", filepath.Join(mnt, "backup.db"))
	rep := l.Cut(false)
	if err := l.Unmount(); err != nil {
		t.Fatal(err)
	}
	if rep.UndoneDirOps != 0 {
		t.Errorf("the cut undid %d directory changes of the backup, want 0 (%+v)", rep.UndoneDirOps, rep)
	}
	out, _ := mustRun(t, nil, 0, "audit", "verify", "--db", filepath.Join(backing, "backup.db"))
	mustContain(t, "audit verify of the backup after the cut", out, "ok: 1 records")
	if _, err := os.Stat(filepath.Join(backing, "backup.db.partial")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup.db.partial after the cut: stat error = %v, want not there", err)
	}
}
