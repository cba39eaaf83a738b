package bolt

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/schedule"
	bbolt "go.etcd.io/bbolt"
)

// The files of every earlier schema version, each written by the fenceq of
// a commit at that version through its HTTP API
// (testdata/make-schema-fixture.sh): jobs 1 completed with a result, 2
// scheduled an hour on after a failure (idempotency key order-7), 3 dead,
// 4 claimed by w2 for an hour, 5 cancelled, 6 available in queue other;
// lease data/a released by h1 and held by h2 (token 2); their audit
// records. Schema version 1 is release-8c034d8.db
// (TestAFileOfTheReleaseBeforeTheSeamOpensAndIsUpgraded); 4 is v0.1.0's;
// 6 is the last before the schedules (issue 28).
var schemaFixtures = []struct {
	version uint64
	file    string
}{
	{2, "schema-2-1b74296.db"},
	{3, "schema-3-9c92b8c.db"},
	{4, "schema-4-3671dce.db"},
	{6, "schema-6-2c24cdb.db"},
}

// TestFilesOfEveryEarlierSchemaVersionOpenAndUpgrade: each file opens
// read-only as it is, then read-write is upgraded to this build's version
// in the one transaction of Open; after it Check passes, the audit chain
// verifies to the same head and goes on from it, every job reads back in
// its state, the idempotency key still names its job, the lease keeps its
// token, and two hours on (the clock moved) the scheduled job and the job
// whose lease ran out are claimable with their next tokens (from the
// index the upgrade to 5 filled), as is the available one.
func TestFilesOfEveryEarlierSchemaVersionOpenAndUpgrade(t *testing.T) {
	for _, fx := range schemaFixtures {
		t.Run(fx.file, func(t *testing.T) {
			path := copyFile(t, filepath.Join("..", "..", "testdata", fx.file))
			if v := fileSchemaVersion(t, path); v != fx.version {
				t.Fatalf("%s has schema version %d, want %d", fx.file, v, fx.version)
			}
			ro, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("Open(read-only) = %v", err)
			}
			before, err := ro.VerifyAudit(ctx)
			ro.Close()
			if err != nil || !before.OK || before.HeadSeq < 15 {
				t.Fatalf("VerifyAudit() read-only = %+v, %v; want OK with the 15 or more records the script wrote", before, err)
			}
			if v := fileSchemaVersion(t, path); v != fx.version {
				t.Fatalf("a read-only open changed the schema version to %d", v)
			}

			later := time.Now().Add(2 * time.Hour)
			s := mustOpenStoreAt(t, path, Options{Rules: db.Rules{Now: func() time.Time { return later }}})
			var v uint64
			if err := s.bolt.View(func(tx *bbolt.Tx) error {
				v = idFromKey(tx.Bucket(bucketMeta).Get(metaSchemaVersion))
				return nil
			}); err != nil || v != schemaVersion {
				t.Fatalf("schema version after Open = %d, want %d", v, schemaVersion)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("Check() after the upgrade = %v", err)
			}
			if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK || rep.HeadSeq != before.HeadSeq || rep.HeadHash != before.HeadHash {
				t.Fatalf("VerifyAudit() after the upgrade = %+v, %v; want OK at the file's head %+v", rep, err, before)
			}
			want := map[uint64]db.State{1: db.StateCompleted, 2: db.StateScheduled, 3: db.StateDead, 4: db.StateClaimed, 5: db.StateCancelled, 6: db.StateAvailable}
			for id, st := range want {
				if j, err := s.GetJob(ctx, id); err != nil || j.State != st {
					t.Errorf("GetJob(%d) = %s, %v; want %s", id, j.State, err, st)
				}
			}
			if j, _ := s.GetJob(ctx, 1); string(j.Result) != `{"ok":true}` || string(j.Payload) != `{"n":1}` {
				t.Errorf("job 1 = result %s, payload %s; want the file's", j.Result, j.Payload)
			}
			if j, _ := s.GetJob(ctx, 2); j.LastError != "boom" || j.Attempts != 1 {
				t.Errorf("job 2 = %+v, want one failure \"boom\"", j)
			}
			if r, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "q", Kind: "b", IdempotencyKey: "order-7"}); err != nil || r.Created || r.Job.ID != 2 {
				t.Errorf("EnqueueJob(order-7) = %+v, %v; want job 2, not created", r, err)
			}
			if l, err := s.GetLease(ctx, "data/a"); err != nil || l.FencingToken != 2 || l.Holder != "local|h2" {
				t.Errorf("GetLease(data/a) = %+v, %v; want token 2 held by local|h2", l, err)
			}
			tokens := map[uint64]uint64{}
			for range 3 {
				jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w3", Queues: []string{"q", "other"}, Lease: time.Minute})
				if err != nil || len(jobs) != 1 {
					t.Fatalf("ClaimJobs() two hours on = %v, %v; want one job", jobs, err)
				}
				tokens[jobs[0].ID] = jobs[0].FencingToken()
			}
			if tokens[2] != 2 || tokens[4] != 2 || tokens[6] != 1 {
				t.Errorf("claimed two hours on: tokens by job %v, want job 2 and 4 with token 2, job 6 with 1", tokens)
			}
			// Schedules work on the upgraded file: one is put and, its
			// tick come, fires a job into the older jobs' id sequence.
			sc, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "after-upgrade", Spec: schedule.Spec{Every: time.Second}})
			if err != nil {
				t.Fatalf("PutSchedule() after the upgrade = %v", err)
			}
			later = sc.Schedule.NextFire
			if res, err := s.FireSchedules(ctx, 10); err != nil || res.Jobs != 1 {
				t.Errorf("FireSchedules() after the upgrade = %+v, %v; want one job", res, err)
			} else if j, err := s.GetJob(ctx, 7); err != nil || j.Schedule != "after-upgrade" {
				t.Errorf("GetJob(7) = %+v, %v; want the schedule's job", j, err)
			}
			if err := s.Check(); err != nil {
				t.Errorf("Check() after the claims = %v", err)
			}
			if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK || rep.HeadSeq <= before.HeadSeq {
				t.Errorf("VerifyAudit() after the claims = %+v, %v; want OK past %d", rep, err, before.HeadSeq)
			}
		})
	}
}

// TestMigrate_NamesEveryUpgradeStep: fenceq migrate --dry-run prints a
// step for every upgrade this build has.
func TestMigrate_NamesEveryUpgradeStep(t *testing.T) {
	for v := uint64(1); v < schemaVersion; v++ {
		if upgrades[v] == nil || upgradeSteps[v] == "" {
			t.Errorf("upgrade from %d: function %v, step %q; want both", v, upgrades[v] != nil, upgradeSteps[v])
		}
	}
	path := copyFile(t, filepath.Join("..", "..", "testdata", "schema-2-1b74296.db"))
	rep, err := Migrate(path, Options{}, true)
	if err != nil || rep.From != 2 || rep.To != schemaVersion || len(rep.Steps) != int(schemaVersion-2) {
		t.Fatalf("Migrate(dry run) = %+v, %v", rep, err)
	}
	if v := fileSchemaVersion(t, path); v != 2 {
		t.Fatalf("a dry run changed the schema version to %d", v)
	}
	if rep, err := Migrate(path, Options{}, false); err != nil || fileSchemaVersion(t, path) != schemaVersion || len(rep.Steps) != int(schemaVersion-2) {
		t.Fatalf("Migrate() = %+v, %v; file at %d", rep, err, fileSchemaVersion(t, path))
	}
}
