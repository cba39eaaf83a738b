//go:build linux

package lazyfs_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"

	"github.com/fenceq/fenceq/internal/lazyfs"
	"github.com/hanwen/go-fuse/v2/fs"
)

// mount mounts a lazy view of a new backing directory and unmounts it when
// the test ends, also when it fails. Without FUSE the test skips, except
// under CI=true, where .ci/power.sh has installed it.
func mount(t *testing.T, seed uint64) (l *lazyfs.FS, backing, mnt string) {
	t.Helper()
	dir := t.TempDir()
	backing, mnt = filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := lazyfs.Mount(backing, mnt, seed)
	if errors.Is(err, lazyfs.ErrNoFUSE) && os.Getenv("CI") != "true" {
		t.Skipf("no FUSE here (%v); .ci/power.sh installs fuse3", err)
	}
	if err != nil {
		t.Fatalf("Mount() error = %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(); err != nil {
			t.Errorf("Unmount() error = %v", err)
		}
	})
	return l, backing, mnt
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync(%s) error = %v", dir, err)
	}
}

// createDurable creates name on the mount and syncs the directory, so that
// the entry survives a cut and only the data is in question.
func createDurable(t *testing.T, mnt, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(mnt, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	syncDir(t, mnt)
	return f
}

func readBacking(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("backing file: %v", err)
	}
	return b
}

func TestLazyFS_AnUnsyncedWriteIsGoneAfterACutAndASyncedOneSurvives(t *testing.T) {
	l, backing, mnt := mount(t, 1)
	f := createDurable(t, mnt, "data")
	if _, err := f.WriteAt([]byte("synced."), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("Sync() error = %v", err)
	}
	if _, err := f.WriteAt([]byte("UNSYNCED"), 7); err != nil {
		t.Fatal(err)
	}
	// Readers see the unsynced write, through a new descriptor too.
	if got, _ := os.ReadFile(filepath.Join(mnt, "data")); string(got) != "synced.UNSYNCED" {
		t.Fatalf("read through the mount = %q, want %q", got, "synced.UNSYNCED")
	}
	// The backing file has not got it: the write did not go through.
	if got := readBacking(t, filepath.Join(backing, "data")); string(got) != "synced." {
		t.Fatalf("backing file before the cut = %q, want %q", got, "synced.")
	}

	rep := l.Cut(false)
	if rep.PendingWrites != 1 || rep.Dropped != 1 {
		t.Errorf("Cut() = %+v, want 1 pending write, dropped", rep)
	}
	if _, err := f.WriteAt([]byte("after"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("write after the cut: error = %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync after the cut: error = %v, want EIO", err)
	}
	if _, err := os.Create(filepath.Join(mnt, "new")); !errors.Is(err, syscall.EIO) {
		t.Errorf("create after the cut: error = %v, want EIO", err)
	}
	if got := readBacking(t, filepath.Join(backing, "data")); string(got) != "synced." {
		t.Errorf("backing file after the cut = %q, want %q", got, "synced.")
	}
}

func TestLazyFS_AnUnmountWithoutACutIsACleanShutdown(t *testing.T) {
	l, backing, mnt := mount(t, 6)
	f, err := os.Create(filepath.Join(mnt, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("written, never synced")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := os.Stat(filepath.Join(backing, "data")); err != nil {
		t.Fatal(err)
	}
	if got := readBacking(t, filepath.Join(backing, "data")); len(got) != 0 {
		t.Fatalf("backing file before the unmount = %q, want it empty", got)
	}
	if err := l.Unmount(); err != nil {
		t.Fatalf("Unmount() error = %v", err)
	}
	if got := readBacking(t, filepath.Join(backing, "data")); string(got) != "written, never synced" {
		t.Errorf("backing file after a clean unmount = %q, want the write", got)
	}
}

func TestLazyFS_MmapReadsSeeUnsyncedWritesAndTruncates(t *testing.T) {
	_, backing, mnt := mount(t, 2)
	f := createDurable(t, mnt, "data")
	page := bytes.Repeat([]byte{'a'}, 4096)
	if _, err := f.WriteAt(page, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// bbolt's way: grow with truncate, map, then pwrite under the map.
	if err := f.Truncate(3 * 4096); err != nil {
		t.Fatal(err)
	}
	m := startMapper(t, filepath.Join(mnt, "data"), 3*4096)
	if a, z := m.at(t, 0), m.at(t, 4096); a != "97" || z != "0" {
		t.Fatalf("mapped bytes 0 and 4096 = %s %s, want 97 ('a') and 0", a, z)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{'b'}, 4096), 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("c"), 2*4096+100); err != nil {
		t.Fatal(err)
	}
	if b1, b2, c := m.at(t, 4096), m.at(t, 8191), m.at(t, 2*4096+100); b1 != "98" || b2 != "98" || c != "99" {
		t.Errorf("mapped bytes after unsynced writes = %s %s %s, want 98 98 99 ('b' 'b' 'c')", b1, b2, c)
	}
	if st, err := os.Stat(filepath.Join(backing, "data")); err != nil || st.Size() != 4096 {
		t.Errorf("backing file size before the sync = %v (%v), want 4096: the truncate is unsynced", st.Size(), err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := readBacking(t, filepath.Join(backing, "data"))
	if len(got) != 3*4096 || got[4096] != 'b' || got[2*4096+100] != 'c' {
		t.Errorf("backing file after the sync: %d bytes, want %d with the writes", len(got), 3*4096)
	}
}

func TestLazyFS_ACutInsideTheNthSyncFailsItAndKeepsTheSyncsBefore(t *testing.T) {
	l, backing, mnt := mount(t, 3)
	f := createDurable(t, mnt, "data")
	l.CutAtSync(2, false)
	if _, err := f.WriteAt([]byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("first fsync: %v, want it to complete", err)
	}
	if _, err := f.WriteAt([]byte("two"), 3); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fdatasync(int(f.Fd())); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second fdatasync: error = %v, want EIO (the cut is in it)", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done() is not closed after the cut")
	}
	if rep := l.Report(); !rep.InSync || rep.SyncOf != "data" || rep.Dropped != 1 {
		t.Errorf("Report() = %+v, want in a sync of data, one write dropped", rep)
	}
	if got := readBacking(t, filepath.Join(backing, "data")); string(got) != "one" {
		t.Errorf("backing file = %q, want %q", got, "one")
	}
}

func TestLazyFS_ACutInsideTheNthSyncOfAMatchingFileSkipsTheOthers(t *testing.T) {
	l, backing, mnt := mount(t, 3)
	a, b := createDurable(t, mnt, "a"), createDurable(t, mnt, "b")
	l.CutAtSyncOf(1, false, func(rel string) bool { return rel == "b" })
	for i, f := range []*os.File{a, a, b} {
		if _, err := f.WriteAt([]byte{'x'}, int64(i)); err != nil {
			t.Fatal(err)
		}
		err := f.Sync()
		if want := f == b; errors.Is(err, syscall.EIO) != want {
			t.Fatalf("sync %d (%s): error = %v, want EIO %v", i+1, f.Name(), err, want)
		}
	}
	if rep := l.Report(); rep.SyncOf != "b" || rep.Dropped != 1 {
		t.Errorf("Report() = %+v, want the cut in the sync of b, its write dropped", rep)
	}
	if got := readBacking(t, filepath.Join(backing, "a")); string(got) != "xx" {
		t.Errorf("backing a = %q, want both synced writes", got)
	}
}

// TestLazyFS_AfterACutAMappedPageNotInTheCacheFaults: what a server with
// its file mapped meets after a cut (bbolt reads through mmap): a read of
// a page the kernel must fetch fails, which the kernel turns into SIGBUS.
func TestLazyFS_AfterACutAMappedPageNotInTheCacheFaults(t *testing.T) {
	l, _, mnt := mount(t, 7)
	f := createDurable(t, mnt, "data")
	if _, err := f.WriteAt(bytes.Repeat([]byte{'a'}, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// The mapper's open drops the file's cached pages (no
	// FOPEN_KEEP_CACHE), so its last page must come from the daemon.
	m := startMapper(t, filepath.Join(mnt, "data"), 1<<20)
	l.Cut(false)
	if got := m.at(t, 1<<20-1); got != "fault" {
		t.Errorf("a read through the mapping after the cut = %s, want a fault", got)
	}
}

// TestLazyFS_ATornCutKeepsSectorPrefixesInAnyOrder writes two versions over
// each of many pages, unsynced, and cuts torn: every sector of a page must
// be old, first or second version; some writes survive in part, some not
// at all, and some pages show the first version over the second (the
// writes landed out of order).
func TestLazyFS_ATornCutKeepsSectorPrefixesInAnyOrder(t *testing.T) {
	l, backing, mnt := mount(t, 4)
	f := createDurable(t, mnt, "data")
	const pages = 64
	if _, err := f.WriteAt(bytes.Repeat([]byte{'o'}, pages*4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []byte{'1', '2'} {
		for p := range pages {
			if _, err := f.WriteAt(bytes.Repeat([]byte{v}, 4096), int64(p)*4096); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep := l.Cut(true)
	if rep.PendingWrites != 2*pages || rep.Dropped == 0 || rep.Partial == 0 || rep.Whole == 0 {
		t.Errorf("Cut(torn) = %+v, want %d pending, some dropped, some partial, some whole", rep, 2*pages)
	}
	got := readBacking(t, filepath.Join(backing, "data"))
	if len(got) != pages*4096 {
		t.Fatalf("backing file: %d bytes, want %d", len(got), pages*4096)
	}
	outOfOrder, torn := 0, 0
	for p := range pages {
		pg := got[p*4096 : (p+1)*4096]
		var sectors []byte
		for s := 0; s < 4096; s += lazyfs.Sector {
			sec := pg[s : s+lazyfs.Sector]
			if !bytes.Equal(sec, bytes.Repeat(sec[:1], lazyfs.Sector)) {
				t.Fatalf("page %d sector %d is mixed: a write survived inside a sector", p, s/lazyfs.Sector)
			}
			sectors = append(sectors, sec[0])
		}
		if bytes.Contains(sectors, []byte("12")) {
			outOfOrder++ // version 2's prefix, then version 1 laid over it
		}
		if bytes.ContainsAny(sectors, "12") && bytes.ContainsAny(sectors, "o") {
			torn++
		}
	}
	if outOfOrder == 0 || torn == 0 {
		t.Errorf("%d pages show writes out of order and %d torn pages, want some of each", outOfOrder, torn)
	}
	t.Logf("torn cut: %+v; %d of %d pages out of order, %d torn", rep, outOfOrder, pages, torn)
}

func TestLazyFS_DirectoryChangesAreDurableOnlyAfterTheDirectoryIsSynced(t *testing.T) {
	l, backing, mnt := mount(t, 5)
	put := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mnt, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(mnt, name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	put("kept", "old kept")
	put("target", "old target")
	syncDir(t, mnt)

	put("durable", "a synced file in a synced entry")
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	put("new", "a synced file in an unsynced entry")
	put("sub/x", "synced into an unsynced entry of a synced directory")
	// A rename over an existing file, unsynced, and an unlink, unsynced.
	if err := os.Rename(filepath.Join(mnt, "durable"), filepath.Join(mnt, "target")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "kept")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(backing, "new")); err != nil {
		t.Fatalf("backing: new is not there before the cut: %v", err)
	}

	rep := l.Cut(false)
	if rep.UndoneDirOps != 4 {
		t.Errorf("Cut() undid %d directory changes, want 4 (create new, create sub/x, rename, unlink)", rep.UndoneDirOps)
	}
	want := map[string]string{
		"kept":    "old kept",
		"target":  "old target",
		"durable": "a synced file in a synced entry",
	}
	for name, content := range want {
		if got := readBacking(t, filepath.Join(backing, name)); string(got) != content {
			t.Errorf("backing %s = %q, want %q", name, got, content)
		}
	}
	for _, gone := range []string{"new", "sub/x"} {
		if _, err := os.Stat(filepath.Join(backing, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("backing %s: Stat error = %v, want not there (its directory was not synced)", gone, err)
		}
	}
	if st, err := os.Stat(filepath.Join(backing, "sub")); err != nil || !st.IsDir() {
		t.Errorf("backing sub: %v, want the directory (its parent was synced)", err)
	}
}

// TestLoopbackTrap_StockLoopbackWritesReachTheBackingFileAtOnce measures the
// trap this package exists to avoid: with go-fuse's own loopback files a
// write lands in the backing file at once (by kernel passthrough when run
// as root, else by the daemon's pwrite), so a lazy layer that wraps them
// has nothing left to forget at a cut.
func TestLoopbackTrap_StockLoopbackWritesReachTheBackingFileAtOnce(t *testing.T) {
	if os.Getenv("CI") != "true" {
		if _, err := os.Stat("/dev/fuse"); err != nil {
			t.Skipf("no FUSE here: %v", err)
		}
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skipf("no FUSE here: %v", err)
		}
	}
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	os.Mkdir(backing, 0o755)
	os.Mkdir(mnt, 0o755)
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fs.Mount(mnt, root, &fs.Options{})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	f, err := os.Create(filepath.Join(mnt, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("never synced")); err != nil {
		t.Fatal(err)
	}
	if got := readBacking(t, filepath.Join(backing, "data")); string(got) != "never synced" {
		t.Fatalf("backing file = %q: the stock loopback kept the write back", got)
	}
}

// TestMain runs the mapper (below) when the test binary is started as one.
// TestLazyFS_AnotherUserCanUseAnAllowOtherMountAndOwnsWhatItCreates is
// what PostgreSQL (run as its own user, on a mount served by root) needs:
// with AllowOther it may use the mount, what it creates is its own in the
// backing directory, chown and chmod pass through, and its files are
// still kept back until synced.
func TestLazyFS_AnotherUserCanUseAnAllowOtherMountAndOwnsWhatItCreates(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the mount is served as root to another user")
	}
	// Not t.TempDir(): its 0700 directories keep the other user out
	// before it reaches the mount.
	dir, err := os.MkdirTemp("", "lazyfs-other-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const uid, gid = 65534, 65534 // nobody, nogroup
	if err := os.Chown(backing, uid, gid); err != nil {
		t.Fatal(err)
	}
	l, err := lazyfs.MountWith(backing, mnt, 1, lazyfs.Options{AllowOther: true})
	if errors.Is(err, lazyfs.ErrNoFUSE) && os.Getenv("CI") != "true" {
		t.Skipf("no FUSE here (%v); .ci/power.sh installs fuse3", err)
	}
	if err != nil {
		t.Fatalf("MountWith() error = %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(); err != nil {
			t.Errorf("Unmount() error = %v", err)
		}
	})
	asOther := func(script string) {
		t.Helper()
		// The shell changes into the mount itself: with cmd.Dir the
		// child's chdir runs between vfork and exec, while the thread
		// that forked holds its P and cannot stop for a GC, so a
		// collection starting then stops the daemon goroutines that
		// must answer the chdir, and the process hangs for good.
		cmd := exec.Command("/bin/sh", "-c", `cd "$1" && `+script, "sh", mnt)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: true}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("as uid %d: %s: %v %s", uid, script, err, out)
		}
	}
	asOther("umask 022 && mkdir -m 700 d && echo synced > d/a && sync d/a && echo unsynced > d/b && chmod 600 d/b")
	owner := func(p string) (uint32, uint32, os.FileMode) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid, os.FileMode(st.Mode & 0o777)
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
	}{{"d", 0o700}, {"d/a", 0o644}, {"d/b", 0o600}} {
		for _, p := range []string{filepath.Join(backing, tc.name), filepath.Join(mnt, tc.name)} {
			if u, g, m := owner(p); u != uid || g != gid || m != tc.mode {
				t.Errorf("%s: owner %d:%d mode %v, want %d:%d %v", p, u, g, m, uid, gid, tc.mode)
			}
		}
	}
	// root (the daemon's user) gives a file away and back.
	if err := os.Chown(filepath.Join(mnt, "d/a"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if u, g, _ := owner(filepath.Join(backing, "d/a")); u != 0 || g != 0 {
		t.Errorf("after chown 0:0 through the mount the backing file is %d:%d", u, g)
	}
	syncDir(t, mnt)
	syncDir(t, filepath.Join(mnt, "d"))
	l.Cut(false)
	if got := string(readBacking(t, filepath.Join(backing, "d/a"))); got != "synced\n" {
		t.Errorf("d/a after the cut = %q, want the synced line", got)
	}
	if got := readBacking(t, filepath.Join(backing, "d/b")); len(got) != 0 {
		t.Errorf("d/b after the cut = %q, want empty (never synced)", got)
	}
}

func TestMain(m *testing.M) {
	if path := os.Getenv("LAZYFS_TEST_MAPPER"); path != "" {
		os.Exit(runMapper(path))
	}
	os.Exit(m.Run())
}

// runMapper maps path (LAZYFS_TEST_MAPPER_SIZE bytes) and answers each
// offset read from stdin with the byte there, or "fault". Mapped reads of
// a FUSE file run in a process of their own: a page fault served by a
// daemon in the same process can deadlock on the process's memory map.
func runMapper(path string) int {
	size, err := strconv.Atoi(os.Getenv("LAZYFS_TEST_MAPPER_SIZE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mapper:", err)
		return 2
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mapper:", err)
		return 2
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mapper: mmap:", err)
		return 2
	}
	debug.SetPanicOnFault(true)
	fmt.Println("mapped")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		off, err := strconv.Atoi(sc.Text())
		if err != nil || off < 0 || off >= size {
			fmt.Println("bad offset")
			continue
		}
		fmt.Println(mappedByte(m, off))
	}
	return 0
}

func mappedByte(m []byte, off int) (s string) {
	defer func() {
		if recover() != nil {
			s = "fault"
		}
	}()
	return strconv.Itoa(int(m[off]))
}

type mapper struct {
	in  io.Writer
	out *bufio.Scanner
}

// startMapper starts this test binary as a mapper of path; it is killed
// when the test ends, before the mount is unmounted.
func startMapper(t *testing.T, path string, size int) *mapper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LAZYFS_TEST_MAPPER="+path, fmt.Sprintf("LAZYFS_TEST_MAPPER_SIZE=%d", size))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	m := &mapper{in: in, out: bufio.NewScanner(out)}
	if !m.out.Scan() || m.out.Text() != "mapped" {
		t.Fatalf("mapper of %s did not start: %q %v", path, m.out.Text(), m.out.Err())
	}
	return m
}

// at is the mapper's byte at off: a decimal number, or "fault".
func (m *mapper) at(t *testing.T, off int) string {
	t.Helper()
	fmt.Fprintln(m.in, off)
	if !m.out.Scan() {
		t.Fatalf("mapper: no answer for offset %d: %v", off, m.out.Err())
	}
	return m.out.Text()
}
