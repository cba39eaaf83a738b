//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// TestRollingUpgrade_ThreeReplicasOfThePreviousReleaseReplacedOneAtATimeUnderLoad:
// three replicas of the previous release (docs/releases.tsv's commit,
// built from this repository's history) serve one PostgreSQL schema under
// load: producers and workers (300 ms leases, stalls, fails: stale
// completions), a long-poll on one replica woken by enqueues through
// another, a named lease holder renewing through every replica while a
// contender tries to take it. One at a time each replica gets SIGTERM and
// today's build starts in its place (the first one migrates the database
// while two old replicas run). Then: every acknowledged enqueue is there
// with its payload, every acknowledged completion kept its token and
// result (none completed twice, no stale token accepted by either
// version), the long-poll was answered in every phase with a job another
// replica's enqueue woke it for, the lease holder never renewed with a
// token below one granted since, Check and the audit chain pass, and the
// rest drains.
func TestRollingUpgrade_ThreeReplicasOfThePreviousReleaseReplacedOneAtATimeUnderLoad(t *testing.T) {
	version, commit := previousRelease(t)
	oldBin := buildRelease(t, version, commit)
	dbURL := pgtest.NewSchema(t)
	run := randomHex(t, 4)
	queue, lpQueue, leaseName := "roll-"+run, "roll-lp-"+run, "roll-lease-"+run
	var srvs []*crashServer
	for range 3 {
		s := &crashServer{t: t, path: dbURL, listen: "127.0.0.1:0", client: newCrashClient(), bin: oldBin}
		s.start()
		srvs = append(srvs, s)
	}
	clients := []*crashClient{srvs[0].client, srvs[1].client, srvs[2].client}
	acks := newCrashAcks()
	st := &crashStats{}
	stopLoad := startCrashLoad(clients, acks, st, queue, run, 3, 6)

	// The previous release's client.Worker, one process per replica,
	// on a queue of its own that a producer fills through every replica.
	workerQueue := "roll-w-" + run
	oldClient := buildOldClient(t, version, commit)
	var workers []*exec.Cmd
	var workerOut []*syncBuffer
	for i, c := range clients {
		cmd := exec.Command(oldClient)
		cmd.Env = cleanEnv("FENCEQ_MODE=worker", "FENCEQ_URL="+*c.base.Load(), "FENCEQ_QUEUE="+workerQueue, fmt.Sprintf("FENCEQ_WORKER=old-%d", i))
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		workers = append(workers, cmd)
		workerOut = append(workerOut, out)
	}
	workerEnqueued := map[uint64]bool{}
	var workerMu sync.Mutex

	var phase atomic.Int32 // how many replicas run today's build
	stop := make(chan struct{})
	var side sync.WaitGroup

	side.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			s, raw, err := clients[i%3].do("POST", "/v1/jobs", fmt.Sprintf(`{"queue":%q,"payload":{"w":%d}}`, workerQueue, i))
			var j crashJob
			if err == nil && s == http.StatusCreated && json.Unmarshal(raw, &j) == nil {
				workerMu.Lock()
				workerEnqueued[j.ID] = true
				workerMu.Unlock()
			} else if err == nil {
				acks.badf("enqueue for the old workers: status %d %s", s, raw)
			}
		}
	})

	// The long-poll: waits on replica 2 (replaced last), the job is
	// enqueued through replica 0 (replaced first; replica 1 while 0 is
	// down) once it waits.
	var woken [4]atomic.Int64
	var lpMissed []string
	var lpSkipped [4][]string
	var lpMu sync.Mutex
	side.Go(func() {
		lp, prod := clients[2], clients[0]
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			ph := phase.Load()
			type answer struct {
				status int
				raw    []byte
				err    error
			}
			got := make(chan answer, 1)
			go func() {
				s, r, err := lp.do("POST", "/v1/claim", fmt.Sprintf(`{"worker":"lp","queues":[%q],"lease_ms":300,"wait_ms":4000}`, lpQueue))
				got <- answer{s, r, err}
			}()
			time.Sleep(200 * time.Millisecond)
			enq, _, err := prod.do("POST", "/v1/jobs", fmt.Sprintf(`{"queue":%q,"payload":{"n":%d}}`, lpQueue, n))
			if err != nil {
				// Replica 0 is being replaced: through replica 1, so that
				// the long-poll does not wait out its time for nothing.
				enq, _, err = clients[1].do("POST", "/v1/jobs", fmt.Sprintf(`{"queue":%q,"payload":{"n":%d}}`, lpQueue, n))
			}
			a := <-got
			if a.err != nil || err != nil || enq != http.StatusCreated || phase.Load() != ph {
				// A replica was down or replaced meanwhile.
				lpMu.Lock()
				lpSkipped[ph] = append(lpSkipped[ph], fmt.Sprintf("long-poll %d %v, enqueue %d %v, phase %d->%d", a.status, a.err, enq, err, ph, phase.Load()))
				lpMu.Unlock()
				continue
			}
			var j crashJob
			switch {
			case a.status == http.StatusOK && json.Unmarshal(a.raw, &j) == nil && j.ID != 0:
				woken[ph].Add(1)
				lp.do("POST", fmt.Sprintf("/v1/jobs/%d/complete", j.ID), fmt.Sprintf(`{"worker":"lp","fencing_token":%d}`, j.FencingToken))
			case a.status == http.StatusNoContent:
				lpMu.Lock()
				lpMissed = append(lpMissed, fmt.Sprintf("phase %d: a long-poll ran out although job %d was enqueued through another replica during it", ph, n))
				lpMu.Unlock()
			default:
				acks.badf("long-poll: status %d %s", a.status, a.raw)
			}
		}
	})

	// The named lease: a holder renews through every replica in turn; a
	// contender tries to take it through another. A renewal that succeeds
	// with a token below one granted since is a stale token accepted.
	var granted atomic.Uint64
	var renewals, contenderWins, staleRefused atomic.Int64
	var leaseBad []string
	var leaseMu sync.Mutex
	grant := func(tok uint64) {
		for {
			old := granted.Load()
			if tok <= old || granted.CompareAndSwap(old, tok) {
				return
			}
		}
	}
	type leaseReply struct {
		FencingToken uint64 `json:"fencing_token"`
	}
	side.Go(func() {
		var token uint64
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			c := clients[i%3]
			if i%15 == 14 {
				// The holder stalls past its lease: the contender may take
				// it, and the holder's next renewal must then be refused.
				time.Sleep(2500 * time.Millisecond)
			}
			if token == 0 {
				s, raw, err := c.do("POST", "/v1/leases/"+leaseName+"/acquire", `{"holder":"holder","ttl_ms":1500}`)
				var l leaseReply
				if err == nil && s == http.StatusOK && json.Unmarshal(raw, &l) == nil {
					token = l.FencingToken
					grant(token)
				}
				continue
			}
			s, raw, err := c.do("POST", "/v1/leases/"+leaseName+"/renew", fmt.Sprintf(`{"holder":"holder","fencing_token":%d,"ttl_ms":1500}`, token))
			switch {
			case err != nil || s >= 500:
			case s == http.StatusOK:
				renewals.Add(1)
				if g := granted.Load(); token < g {
					leaseMu.Lock()
					leaseBad = append(leaseBad, fmt.Sprintf("renewal with token %d accepted after token %d was granted: %s", token, g, raw))
					leaseMu.Unlock()
				}
			default:
				if granted.Load() > token {
					staleRefused.Add(1)
				}
				token = 0 // lost (expired and taken): acquire again
			}
		}
	})
	side.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
			}
			s, raw, err := clients[(i+1)%3].do("POST", "/v1/leases/"+leaseName+"/acquire", `{"holder":"contender","ttl_ms":300}`)
			var l leaseReply
			if err == nil && s == http.StatusOK && json.Unmarshal(raw, &l) == nil {
				contenderWins.Add(1)
				grant(l.FencingToken)
			}
		}
	})

	started := time.Now()
	for i, s := range srvs {
		time.Sleep(2 * time.Second)
		if err := s.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := s.proc.exit(t, 30*time.Second); code != 0 {
			t.Errorf("replica %d (%s) exited %d after SIGTERM; stderr:\n%s", i, version, code, s.proc.stderr)
		}
		s.bin = ""
		s.start()
		phase.Add(1)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	side.Wait()
	stopLoad()
	for i, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
		if err := w.Wait(); err != nil {
			t.Errorf("the %s worker %d: %v\n%s", version, i, err, workerOut[i])
		}
	}
	time.Sleep(crashLease + 100*time.Millisecond)

	store, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkStoreAcks(t, store, acks, "after the rolling upgrade")
	workerDone := 0
	completedBy := map[uint64]string{}
	for i, out := range workerOut {
		for _, line := range strings.Split(out.String(), "\n") {
			var id, token uint64
			var outcome string
			if n, _ := fmt.Sscanf(line, "done %d %d %s", &id, &token, &outcome); n != 3 || outcome != "completed" {
				continue
			}
			workerDone++
			if prev, ok := completedBy[id]; ok {
				t.Errorf("job %d completed by the %s workers twice (%s, then worker %d with token %d)", id, version, prev, i, token)
			}
			completedBy[id] = fmt.Sprintf("worker %d with token %d", i, token)
			j, err := store.GetJob(context.Background(), id)
			if err != nil || j.State != "completed" || j.Attempts != token || !workerEnqueued[id] {
				t.Errorf("job %d, completed by the %s worker %d with token %d: %+v, %v (enqueue acknowledged: %v)", id, version, i, token, j, err, workerEnqueued[id])
			}
		}
	}
	for id := range workerEnqueued {
		if _, err := store.GetJob(context.Background(), id); err != nil {
			t.Errorf("job %d for the old workers, acknowledged: %v", id, err)
		}
	}
	if workerDone == 0 {
		t.Errorf("the %s workers completed nothing; their output:\n%s\n%s\n%s", version, workerOut[0], workerOut[1], workerOut[2])
	}
	store.Close()
	for {
		// The long-poll's queue (a job enqueued while its replica was
		// replaced waits there) and the old workers'.
		s, raw, err := srvs[1].client.do("POST", "/v1/claim", fmt.Sprintf(`{"worker":"drain","queues":[%q,%q],"lease_ms":30000,"max":100}`, lpQueue, workerQueue))
		var page struct{ Jobs []crashJob }
		if err != nil || s != http.StatusOK || json.Unmarshal(raw, &page) != nil {
			break
		}
		for _, j := range page.Jobs {
			if s, raw, err := srvs[1].client.do("POST", fmt.Sprintf("/v1/jobs/%d/complete", j.ID), fmt.Sprintf(`{"worker":"drain","fencing_token":%d}`, j.FencingToken)); err != nil || s != http.StatusOK {
				t.Fatalf("drain complete of long-poll job %d: %d %s %v", j.ID, s, raw, err)
			}
		}
	}
	drained := srvs[1].drain(queue)
	store, err = postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	acks.checkDrained(t, checkStoreAcks(t, store, acks, "after the drain"))

	for ph := range woken {
		if woken[ph].Load() == 0 {
			t.Errorf("phase %d (%d of 3 replicas on today's build): no long-poll was woken by an enqueue through another replica; rounds skipped: %q", ph, ph, lpSkipped[ph])
		}
	}
	for _, m := range lpMissed {
		t.Error(m)
	}
	for _, m := range leaseBad {
		t.Error(m)
	}
	if renewals.Load() == 0 || contenderWins.Load() == 0 || staleRefused.Load() == 0 {
		t.Errorf("the lease holder renewed %d times, the contender won %d times, %d renewals with a token taken over were refused; want each at least once", renewals.Load(), contenderWins.Load(), staleRefused.Load())
	}
	acks.mu.Lock()
	defer acks.mu.Unlock()
	t.Logf("rolling upgrade %s -> today in %v: %d enqueues and %d completions acknowledged, %d claims, %d stale completions refused; %d jobs for the %s workers, %d completed by them; long-polls woken per phase %d/%d/%d/%d; %d lease renewals, the contender won %d times (tokens up to %d), %d renewals with a taken-over token refused; %d jobs drained; none lost, none completed twice",
		version, time.Since(started).Round(time.Millisecond), len(acks.enqueued), len(acks.completed), st.claims.Load(), st.stale.Load(), len(workerEnqueued), version, workerDone,
		woken[0].Load(), woken[1].Load(), woken[2].Load(), woken[3].Load(), renewals.Load(), contenderWins.Load(), granted.Load(), staleRefused.Load(), drained)
}
