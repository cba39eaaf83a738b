package tick_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/tick"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/schedule"
)

// zoneDir is this test binary's extra zone database ($ZONEINFO, which Go
// reads once a process, so it is set before any test runs): a zone that a
// test removes from it is what a host whose zone database lost a zone
// leaves a stored schedule with.
var zoneDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fenceq-zoneinfo-")
	if err != nil {
		panic(err)
	}
	zoneDir = dir
	os.Setenv("ZONEINFO", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// addZone writes a zone name at UTC+0 into zoneDir (a TZif version 1 file:
// no transitions, one type) and returns a function that removes it.
func addZone(t *testing.T, name string) (remove func()) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("TZif")
	b.Write(make([]byte, 16))                      // version 1, reserved
	for _, n := range []uint32{0, 0, 0, 0, 1, 4} { // isut, isstd, leap, time, type, char counts
		binary.Write(&b, binary.BigEndian, n)
	}
	b.Write([]byte{0, 0, 0, 0, 0, 0}) // the type: offset 0, not DST, abbreviation 0
	b.WriteString("GON\x00")
	path := filepath.Join(zoneDir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	remove = func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(path) })
	return remove
}

// A schedule whose zone left the zone database is reported by the round
// once, however many calls it makes, and does not keep the others from
// firing; Next is the healthy schedule's next tick, so the loop sleeps.
func TestRound_ASkippedBrokenScheduleIsReportedOnceAndTheOthersFire(t *testing.T) {
	clk := testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	s := openStore(t, clk.Now)
	remove := addZone(t, "Fenceq/RoundGone")
	put(t, s, "a-gone", schedule.Spec{Every: time.Minute, Timezone: "Fenceq/RoundGone"})
	next := put(t, s, "b-ok", schedule.Spec{Every: time.Minute}).NextFire
	remove()
	clk.Advance(next.Sub(clk.Now()))
	res, decided, err := tick.Round(context.Background(), s, tick.Options{Limit: 1})
	if err != nil || decided != 1 || !res.Next.Equal(next.Add(time.Minute)) {
		t.Fatalf("Round(limit 1) = %+v, %d, %v; want b-ok decided, next %v", res, decided, err, next.Add(time.Minute))
	}
	if len(res.Broken) != 1 || res.Broken[0].Name != "a-gone" || !errors.Is(res.Broken[0].Err, db.ErrScheduleSpec) {
		t.Errorf("Round(limit 1) Broken = %+v, want a-gone once, with db.ErrScheduleSpec", res.Broken)
	}
	jobs := jobsOf(t, s)
	if len(jobs) != 1 || jobs[0].Schedule != "b-ok" {
		t.Errorf("jobs = %+v, want one of b-ok", jobs)
	}
	if d := tick.SleepFor(res, decided, clk.Now(), time.Hour); d != time.Minute {
		t.Errorf("SleepFor(the round) = %v, want 1m until b-ok's next tick, not a spin on a-gone's", d)
	}
}

// The loop logs a skipped broken schedule at WARN with its name and why,
// not as a failed pass, and goes on firing the others.
func TestRun_LogsABrokenScheduleAtWarnAndFiresTheOthers(t *testing.T) {
	clk := testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	s := openStore(t, clk.Now)
	remove := addZone(t, "Fenceq/RunGone")
	put(t, s, "a-gone", schedule.Spec{Every: time.Minute, Timezone: "Fenceq/RunGone"})
	next := put(t, s, "b-ok", schedule.Spec{Every: time.Minute}).NextFire
	remove()
	clk.Advance(next.Sub(clk.Now()))
	var mu sync.Mutex
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	stop := run(t, s, tick.Options{Limit: 1, MaxSleep: time.Hour, Now: clk.Now, Logger: logger})
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logged(), "level=") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if jobs := jobsOf(t, s); len(jobs) != 1 || jobs[0].Schedule != "b-ok" {
		t.Errorf("jobs = %+v, want one of b-ok", jobs)
	}
	out := logged()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "schedule=a-gone") || !strings.Contains(out, "Fenceq/RunGone") {
		t.Errorf("log = %q; want one WARN line (one round: the loop then sleeps until b-ok's next tick) naming a-gone and its zone", out)
	}
	if strings.Contains(out, "level=ERROR") {
		t.Errorf("log = %q; want no failed pass", out)
	}
}
