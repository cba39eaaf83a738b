package bolt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/schedule"
	"github.com/vmihailenco/msgpack/v5"
	bbolt "go.etcd.io/bbolt"
)

// goldenScheduleV1 sets every field of a version 1 schedule record, so
// that the golden file pins every tag.
func goldenScheduleV1() *scheduleRecord {
	at := func(sec int) int64 { return time.Date(2031, 3, 14, 15, 9, sec, 0, time.UTC).UnixNano() }
	return &scheduleRecord{V: 1, ScheduleRecord: db.ScheduleRecord{Cron: "30 2 * * *", Every: int64(time.Minute), StartAt: at(0),
		Timezone: "Europe/Berlin", Catchup: "all", CatchupWindow: int64(2 * time.Hour), Overlap: "skip", Jitter: int64(time.Second),
		Queue: "reports", Kind: "nightly", Payload: []byte(`{"n":1}`), Priority: -2, MaxAttempts: 5,
		CreatedAt: at(1), UpdatedAt: at(2), CreatedBy: "ops", PausedAt: at(3), PausedBy: "ops2", Next: at(4),
		LastJob: 77, LastScheduledFor: at(5), MissedTicks: 6, SkippedTicks: 7}}
}

// goldenScheduledJobV1 is a job record of version 1 with the optional
// fields of schema version 7.
func goldenScheduledJobV1() *jobRecord {
	at := time.Date(2031, 3, 14, 15, 9, 0, 0, time.UTC).UnixNano()
	return &jobRecord{V: 1, JobRecord: db.JobRecord{ID: 9, Queue: "reports", State: db.StateAvailable, MaxAttempts: 5, Budget: 5,
		RunAt: at, CreatedAt: at, UpdatedAt: at, Schedule: "nightly", ScheduledFor: at, Backfilled: true}}
}

// The stored forms of a schedule and of a schedule's job are pinned by
// golden files; older goldens keep decoding (the job golden of v1 without
// the new fields is TestJobRecordGoldenFilesStillDecode's).
func TestScheduleRecordsMatchTheirGoldens(t *testing.T) {
	for _, g := range []struct {
		file   string
		rec    any
		decode func([]byte) (any, error)
		keys   []string
	}{
		{"schedule_v1.msgpack", goldenScheduleV1(), func(b []byte) (any, error) {
			r, err := decodeSchedule("golden", b)
			if err != nil {
				return nil, err
			}
			return &scheduleRecord{V: 1, ScheduleRecord: *r}, nil
		}, []string{"v", "cr", "ev", "sa", "tz", "cu", "cw", "ov", "ji", "q", "k", "p", "pr", "ma", "ca", "ua", "cb", "pa", "pb", "nx", "lj", "ls", "mt", "st"}},
		{"job_v1_scheduled.msgpack", goldenScheduledJobV1(), func(b []byte) (any, error) { return decodeJob(b) },
			[]string{"v", "id", "q", "s", "a", "ma", "bu", "ra", "ca", "ua", "sc", "sf", "bf"}},
	} {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join(goldenDir, g.file)
			got, err := encodeRecord(g.rec)
			if err != nil {
				t.Fatalf("encodeRecord() error = %v", err)
			}
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden: %v (run go test ./db/bolt -run Golden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encodeRecord(golden) =\n%x\nwant (%s)\n%x", got, path, want)
			}
			dec, err := g.decode(want)
			if err != nil || !reflect.DeepEqual(dec, g.rec) {
				t.Errorf("decode(%s) = %+v, %v; want %+v", g.file, dec, err, g.rec)
			}
			var m map[string]any
			if err := msgpack.Unmarshal(want, &m); err != nil {
				t.Fatalf("golden is not a msgpack map: %v", err)
			}
			for _, k := range g.keys {
				if _, ok := m[k]; !ok {
					t.Errorf("golden has no key %q", k)
				}
			}
			if len(m) != len(g.keys) {
				t.Errorf("golden has %d keys, want %d", len(m), len(g.keys))
			}
		})
	}
}

func TestScheduleRecordKnowsEveryField(t *testing.T) {
	if n := reflect.TypeFor[db.ScheduleRecord]().NumField(); n != 23 {
		t.Errorf("db.ScheduleRecord has %d fields; goldenScheduleV1 and its golden file know 23: update them", n)
	}
}

func tickKeys(t *testing.T, s *Store, name string) []int64 {
	t.Helper()
	var out []int64
	err := s.view(func(tx *bbolt.Tx) error {
		prefix := scheduleTickPrefix(name)
		c := tx.Bucket(bucketScheduleTicks).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			out = append(out, timeFromKey(k, len(prefix)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Tick records stay bounded: a catch-up of 300 ticks in passes of
// schedule.MaxTicksPerPlan leaves the newest db.ScheduleTicksKept, and a
// delete removes them all; the tick records of another schedule stay.
func TestTickRecordsAreKeptNewestFirstAndBounded(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	put := func(name string) time.Time {
		res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: name,
			Spec: schedule.Spec{Every: time.Second, Catchup: schedule.CatchupAll, CatchupWindow: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Schedule.NextFire
	}
	first := put("busy")
	put("b") // a name that sorts before "busy"'s ticks
	clk.Advance(first.Sub(clk.Now()) + 300*time.Second)
	jobs, passes := 0, 0
	for {
		res, err := s.FireSchedules(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if res.Schedules == 0 {
			break
		}
		jobs += res.Jobs
		passes++
	}
	if jobs < 2*301 || passes < 3 {
		t.Errorf("FireSchedules made %d jobs in %d passes, want 301 per schedule in passes of at most %d", jobs, passes, schedule.MaxTicksPerPlan)
	}
	ticks := tickKeys(t, s, "busy")
	if len(ticks) != db.ScheduleTicksKept || ticks[len(ticks)-1] != clk.Now().UnixNano() {
		t.Fatalf("tick records of busy = %d, last %v; want the newest %d, the last now", len(ticks), db.FromUnixNano(ticks[len(ticks)-1]), db.ScheduleTicksKept)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check() = %v", err)
	}
	if _, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "busy"}); err != nil {
		t.Fatal(err)
	}
	if n := len(tickKeys(t, s, "busy")); n != 0 {
		t.Errorf("tick records after the delete = %d, want 0", n)
	}
	if n := len(tickKeys(t, s, "b")); n != db.ScheduleTicksKept {
		t.Errorf("tick records of the other schedule = %d, want %d", n, db.ScheduleTicksKept)
	}
}

// A call enqueues at most db.MaxFireJobs jobs: twenty schedules catching
// up 100 ticks each take several calls, each under the bound, and in the
// end every tick is fired once.
func TestFireSchedulesEnqueuesAtMostMaxFireJobsACall(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	var first time.Time
	for i := range 20 {
		res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: fmt.Sprint("s", i),
			Spec: schedule.Spec{Every: time.Second, Catchup: schedule.CatchupAll}})
		if err != nil {
			t.Fatal(err)
		}
		first = res.Schedule.NextFire
	}
	clk.Advance(first.Sub(clk.Now()) + 99*time.Second) // 100 ticks due each
	total, calls := 0, 0
	for {
		res, err := s.FireSchedules(ctx, 20)
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs > db.MaxFireJobs {
			t.Errorf("FireSchedules() enqueued %d jobs in one call, above %d", res.Jobs, db.MaxFireJobs)
		}
		if res.Schedules == 0 {
			break
		}
		total += res.Jobs
		calls++
	}
	if total != 20*100 || calls < 2 {
		t.Errorf("FireSchedules() enqueued %d jobs in %d calls, want 2000 in 2 or more", total, calls)
	}
}

// A tick whose record exists is not enqueued again: the record decides.
func TestATickWithARecordIsNotEnqueuedAgain(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "x", Spec: schedule.Spec{Every: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	tick := res.Schedule.NextFire
	// As if another writer had decided the tick (job 99) but not moved next.
	if err := s.bolt.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketScheduleTicks).Put(scheduleTickKey("x", tick.UnixNano()), u64(99))
	}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(tick.Sub(clk.Now()))
	fr, err := s.FireSchedules(ctx, 10)
	if err != nil || fr.Jobs != 0 || fr.Schedules != 1 {
		t.Fatalf("FireSchedules() = %+v, %v; want the schedule decided with no job", fr, err)
	}
	if sc, _ := s.GetSchedule(ctx, "x"); !sc.NextFire.Equal(tick.Add(time.Minute)) || sc.LastJob != 0 {
		t.Errorf("after the pass: next %v, last job %d; want next moved on, no job", sc.NextFire, sc.LastJob)
	}
}

// Backups are the whole file: a schedule, its next tick and its tick
// records survive a backup and its restore, which then fires the next tick.
func TestAScheduleSurvivesBackupAndRestore(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "kept", Spec: schedule.Spec{Cron: "*/5 * * * *", Timezone: "America/New_York"},
		Job: db.ScheduleTemplate{Queue: "q", Payload: json.RawMessage(`[1]`)}})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(res.Schedule.NextFire.Sub(clk.Now()))
	if fr, err := s.FireSchedules(ctx, 10); err != nil || fr.Jobs != 1 {
		t.Fatalf("FireSchedules() = %+v, %v", fr, err)
	}
	want, _ := s.GetSchedule(ctx, "kept")
	var buf bytes.Buffer
	if _, err := s.Backup(ctx, &buf); err != nil {
		t.Fatalf("Backup() error = %v", err)
	}
	path := filepath.Join(t.TempDir(), "restored.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustOpenStoreAt(t, path, testOptions(clk))
	got, err := r.GetSchedule(ctx, "kept")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("GetSchedule() on the restored file = %+v, %v; want %+v", got, err, want)
	}
	if n := len(tickKeys(t, r, "kept")); n != 1 {
		t.Errorf("tick records on the restored file = %d, want 1", n)
	}
	clk.Advance(5 * time.Minute)
	if fr, err := r.FireSchedules(ctx, 10); err != nil || fr.Jobs != 1 {
		t.Errorf("FireSchedules() on the restored file = %+v, %v; want the next tick", fr, err)
	}
}

// A file of schema version 6 (no schedules) is upgraded to 7: migrate
// --dry-run names the step, the upgrade adds the buckets, and schedules
// work on it.
func TestAFileOfSchema6IsUpgradedWithTheScheduleBuckets(t *testing.T) {
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, testOptions(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	s.Close()
	// Make it a file of version 6: without the three buckets.
	b, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketSchedules, bucketScheduleNext, bucketScheduleTicks} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(6))
	}); err != nil {
		t.Fatal(err)
	}
	b.Close()

	// Read-only, the older file reads as it is: no schedules.
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("Open(read-only) = %v", err)
	}
	if page, err := ro.ListSchedules(ctx, db.ListSchedulesRequest{}); err != nil || len(page.Schedules) != 0 {
		t.Errorf("ListSchedules() on a version 6 file = %+v, %v; want none", page, err)
	}
	if fr, err := ro.FireSchedules(ctx, 10); err != nil || fr.Jobs != 0 {
		t.Errorf("FireSchedules() on a read-only version 6 file = %+v, %v; want nothing", fr, err)
	}
	ro.Close()

	rep, err := Migrate(path, Options{}, true)
	if err != nil || rep.From != 6 || rep.To != 7 || len(rep.Steps) != 1 || rep.Steps[0].From != 6 || rep.Steps[0].What == "" {
		t.Fatalf("Migrate(dry run) = %+v, %v; want one step from 6", rep, err)
	}
	s = mustOpenStoreAt(t, path, testOptions(clk))
	s.Close()
	if v := fileSchemaVersion(t, path); v != schemaVersion {
		t.Fatalf("schema version after Open = %d, want %d", v, schemaVersion)
	}
	s = mustOpenStoreAt(t, path, testOptions(clk))
	if j, err := s.GetJob(ctx, job.ID); err != nil || j.Schedule != "" || !j.ScheduledFor.IsZero() {
		t.Errorf("GetJob() of the older job = %+v, %v; want it without schedule fields", j, err)
	}
	res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "new", Spec: schedule.Spec{Every: time.Minute}})
	if err != nil {
		t.Fatalf("PutSchedule() after the upgrade = %v", err)
	}
	clk.Advance(res.Schedule.NextFire.Sub(clk.Now()))
	if fr, err := s.FireSchedules(ctx, 10); err != nil || fr.Jobs != 1 {
		t.Errorf("FireSchedules() after the upgrade = %+v, %v", fr, err)
	}
	if err := s.Check(); err != nil {
		t.Errorf("Check() = %v", err)
	}
}

// Check finds an index entry that no schedule has, and a running
// schedule without its entry.
func TestCheckFindsAScheduleIndexThatDisagreesWithItsRecords(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "x", Spec: schedule.Spec{Every: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	key := scheduleNextKey("x", res.Schedule.NextFire.UnixNano())
	for _, tt := range []struct {
		what        string
		break_, fix func(b *bbolt.Bucket) error
	}{
		{"a missing entry", func(b *bbolt.Bucket) error { return b.Delete(key) }, func(b *bbolt.Bucket) error { return b.Put(key, nil) }},
		{"a stray entry", func(b *bbolt.Bucket) error { return b.Put(scheduleNextKey("y", 5), nil) }, func(b *bbolt.Bucket) error { return b.Delete(scheduleNextKey("y", 5)) }},
	} {
		for i, f := range []func(b *bbolt.Bucket) error{tt.break_, tt.fix} {
			if err := s.bolt.Update(func(tx *bbolt.Tx) error { return f(tx.Bucket(bucketScheduleNext)) }); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); (err != nil) != (i == 0) {
				t.Errorf("Check() with %s (broken %v) = %v", tt.what, i == 0, err)
			}
		}
	}
}

// BenchmarkFireSchedules: a pass with one schedule due among 10 or 1000
// costs the same (the index holds them by next fire time); none_due is a
// pass that finds nothing, one read transaction.
func BenchmarkFireSchedules(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprint(n, "_schedules"), func(b *testing.B) {
			clk := newFakeClock()
			s := mustOpenStore(b, testOptions(clk))
			for i := range n - 1 {
				if _, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: fmt.Sprintf("idle-%04d", i), Spec: schedule.Spec{Every: 24 * time.Hour}}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "due", Spec: schedule.Spec{Every: time.Second, Catchup: schedule.CatchupNone}}); err != nil {
				b.Fatal(err)
			}
			b.Run("none_due", func(b *testing.B) {
				for range b.N {
					res, err := s.FireSchedules(ctx, 100)
					if err != nil || res.Schedules != 0 {
						b.Fatalf("FireSchedules() = %+v, %v; want nothing due", res, err)
					}
				}
			})
			b.Run("one_due", func(b *testing.B) {
				for range b.N {
					clk.Advance(time.Second)
					res, err := s.FireSchedules(ctx, 100)
					if err != nil || res.Jobs != 1 || res.Schedules != 1 {
						b.Fatalf("FireSchedules() = %+v, %v; want the one due schedule", res, err)
					}
				}
			})
		})
	}
}

// FuzzScheduleRecord: any bytes stored as a schedule decode to a record
// or to ErrCorrupt, never a panic; a record that decodes encodes stably;
// and planted in a real file under a due index entry, the reads, a pass
// of FireSchedules and Check answer (an error at most), never panic.
func FuzzScheduleRecord(f *testing.F) {
	for _, r := range []*scheduleRecord{goldenScheduleV1(),
		{V: 1, ScheduleRecord: db.ScheduleRecord{Every: int64(time.Second), Timezone: "UTC", Catchup: "all", Overlap: "skip", Queue: "q", CreatedAt: 1, Next: 2}}} {
		b, err := encodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte{0x80})
	s := fuzzStore(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeSchedule("x", data)
		if err != nil {
			if !errors.Is(err, db.ErrCorrupt) {
				t.Fatalf("decodeSchedule(%x) error = %v, want ErrCorrupt", data, err)
			}
		} else {
			_ = rec.Schedule("x", "")
			_, _ = db.FireSchedule("x", rec, false, time.Unix(0, 3))
			enc, err := encodeRecord(&scheduleRecord{V: 1, ScheduleRecord: *rec})
			if err != nil {
				t.Fatalf("encodeRecord(decodeSchedule(%x)) error = %v", data, err)
			}
			again, err := decodeSchedule("x", enc)
			if err != nil {
				t.Fatalf("a decoded record does not decode again: %v", err)
			}
			if enc2, _ := encodeRecord(&scheduleRecord{V: 1, ScheduleRecord: *again}); !bytes.Equal(enc, enc2) {
				t.Fatalf("decode/encode is not stable: %x then %x", enc, enc2)
			}
		}
		plant(t, s, bucketSchedules, []byte("x"), data, func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucketScheduleNext)
			if err := b.ForEach(func(k, _ []byte) error { return b.Delete(k) }); err != nil {
				return err
			}
			next := int64(2)
			if rec != nil {
				next = rec.Next
			}
			return b.Put(scheduleNextKey("x", next), nil)
		})
		if _, err := s.GetSchedule(ctx, "x"); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("GetSchedule on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
		if _, err := s.ListSchedules(ctx, db.ListSchedulesRequest{}); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("ListSchedules on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
		_, _ = s.FireSchedules(ctx, 10)
		_ = s.Check()
	})
}
