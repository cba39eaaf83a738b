//go:build linux

// Package lazyfs is a test filesystem that forgets what was not synced.
//
// It mounts (FUSE, go-fuse) a pass-through view of a backing directory.
// Writes to a file are kept in memory, visible to every reader — read(2)
// and mmap alike, since the mount runs in page-cache mode, not direct I/O —
// and reach the backing file only when the file is fsynced or fdatasynced.
// Directory changes (create, mkdir, rename, unlink, rmdir) are applied to
// the backing directory at once but are undone by a cut unless the
// directory that holds the new name was fsynced since: POSIX's rule, which
// is stricter than ext4's habit of committing a new file's entry with its
// data.
//
// A cut is a power loss: every later operation on the mount fails with
// EIO, and the backing directory is left as a power cut would leave a
// disk, each file as of its last sync. In torn mode, each unsynced write
// may survive in part: a prefix ending on a 512-byte boundary (a write of
// one sector or less survives whole or not at all), the survivors landing
// in any order. A cut can be armed to land inside the
// N-th sync from now, which then fails instead of completing.
//
// File data is served by this package, never by go-fuse's loopback files:
// those ask the kernel for passthrough when run as root, and a passthrough
// write never reaches the daemon, so nothing could be kept back.
//
// Metadata other than size is not modelled: the mode and owner are the
// backing files' own (a file or directory made through the mount is
// given to the caller, and chmod and chown pass through at once); times
// and xattrs are not kept. Hard links, symlinks and special files are
// refused, and a rename never replaces a directory nor puts one in the
// place of a file.
//
// lazyfs is for tests only.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Sector is the granularity at which a torn write survives.
const Sector = 512

// ErrNoFUSE is returned by Mount when this machine cannot mount FUSE
// filesystems (no /dev/fuse, no fusermount3, or the mount is refused).
var ErrNoFUSE = errors.New("lazyfs: FUSE is not available")

// Report is what a cut did.
type Report struct {
	// InSync is true when the cut landed inside a sync (CutAtSync), which
	// then failed.
	InSync bool
	// SyncOf is the path (relative to the mount) of the file or directory
	// whose sync the cut landed in.
	SyncOf string
	// Torn is true for a torn cut.
	Torn bool
	// PendingWrites is the number of unsynced writes (and truncates) at
	// the cut, over all files; PendingBytes their bytes.
	PendingWrites, PendingBytes int
	// Dropped writes vanished whole; Partial survived as a strict prefix;
	// Whole survived whole (torn mode only for the last two).
	Dropped, Partial, Whole int
	// PartialAt are the file offsets of the writes that survived in part.
	PartialAt []int64
	// UndoneDirOps is the number of directory changes the cut undid.
	UndoneDirOps int
}

// Stats count what the mount did so far.
type Stats struct {
	Writes, Syncs, DirSyncs int
}

// FS is a mounted lazy filesystem.
type FS struct {
	backing    string
	stash      string
	mountpoint string
	server     *fuse.Server

	mu       sync.Mutex
	rng      *rand.Rand
	files    map[uint64]*file // by backing inode number
	dirOps   []*dirOp         // not yet durable, oldest first
	stashN   int
	cut      bool
	report   Report
	cutDone  chan struct{}
	armed    int // the cut lands in the armed-th sync from now; 0: not armed
	armTorn  bool
	armMatch func(rel string) bool // nil: every sync counts
	stats    Stats
	gone     bool // unmounted
}

// Options are the mount's options beyond Mount's.
type Options struct {
	// AllowOther lets users other than the one who mounted use the mount
	// (FUSE's allow_other): a daemon run as root serving a PostgreSQL
	// data directory to the postgres user.
	AllowOther bool
}

// Mount mounts a lazy view of backing at mountpoint (both existing
// directories). seed drives torn cuts. Unmount must be called, also when
// the test fails.
func Mount(backing, mountpoint string, seed uint64) (*FS, error) {
	return MountWith(backing, mountpoint, seed, Options{})
}

// MountWith is Mount with options.
func MountWith(backing, mountpoint string, seed uint64, o Options) (*FS, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFUSE, err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFUSE, err)
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	// Undone unlinks and overwritten rename targets wait here, beside the
	// backing directory (a rename must not cross filesystems).
	stash, err := os.MkdirTemp(filepath.Dir(backing), ".lazyfs-stash-")
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	l := &FS{backing: backing, stash: stash, mountpoint: mountpoint,
		rng: rand.New(rand.NewPCG(seed, 0x1a2f5)), files: map[uint64]*file{}, cutDone: make(chan struct{})}
	root := &node{lfs: l}
	zero := time.Duration(0)
	srv, err := fs.Mount(mountpoint, root, &fs.Options{
		// No kernel caching of names or attributes: what the kernel
		// believes is what this package says, at every call.
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{FsName: "lazyfs", Name: "lazyfs", AllowOther: o.AllowOther},
	})
	if err != nil {
		os.RemoveAll(stash)
		// /dev/fuse may be there but unusable (no permission, no
		// CAP_SYS_ADMIN in a container): FUSE is not available either.
		return nil, fmt.Errorf("%w: mount %s: %v", ErrNoFUSE, mountpoint, err)
	}
	l.server = srv
	return l, nil
}

// Mountpoint is where the filesystem is mounted.
func (l *FS) Mountpoint() string { return l.mountpoint }

// Unmount unmounts (fusermount3 -u; detached with -z when busy) and
// removes the stash. After a cut the backing directory keeps what survived;
// without one, Unmount is a clean shutdown and everything written reaches
// it, as when a real filesystem is unmounted. A second Unmount does nothing.
func (l *FS) Unmount() error {
	l.mu.Lock()
	if l.gone {
		l.mu.Unlock()
		return nil
	}
	l.gone = true
	var err error
	if !l.cut {
		for _, f := range l.files {
			if aerr := f.apply(f.pending); aerr != nil && err == nil {
				err = fmt.Errorf("lazyfs: unmount: %w", aerr)
			}
			f.pending = nil
		}
		for _, op := range l.dirOps {
			if op.stashed != "" {
				os.RemoveAll(op.stashed)
			}
		}
		l.dirOps = nil
	}
	l.mu.Unlock()
	if uerr := l.server.Unmount(); uerr != nil {
		// A process still has a file open: detach the mount now; the
		// kernel lets go when the last file is closed.
		if out, zerr := exec.Command("fusermount3", "-u", "-z", l.mountpoint).CombinedOutput(); zerr != nil {
			err = fmt.Errorf("lazyfs: unmount %s: %v; fusermount3 -u -z: %v %s", l.mountpoint, uerr, zerr, out)
		}
	} else {
		l.server.Wait()
	}
	l.mu.Lock()
	for _, f := range l.files {
		f.fd.Close()
	}
	l.mu.Unlock()
	os.RemoveAll(l.stash)
	return err
}

// Cut cuts the power now: every later operation fails, and unsynced
// writes are dropped (torn: each survives in part, or whole, or not).
func (l *FS) Cut(torn bool) Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cutLocked(false, torn)
	return l.report
}

// CutAtSync arms a cut inside the n-th sync (file or directory, n >= 1)
// from now: that sync fails with EIO instead of completing.
func (l *FS) CutAtSync(n int, torn bool) {
	l.CutAtSyncOf(n, torn, nil)
}

// CutAtSyncOf is CutAtSync counting only the syncs of the paths (relative
// to the mount) that match accepts; nil accepts every one.
func (l *FS) CutAtSyncOf(n int, torn bool, match func(rel string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.armTorn, l.armMatch = n, torn, match
}

// Done is closed when the power has been cut.
func (l *FS) Done() <-chan struct{} { return l.cutDone }

// Report is what the cut did; zero before the cut.
func (l *FS) Report() Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.report
}

// Stats returns the counts so far.
func (l *FS) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

func (l *FS) cutLocked(inSync, torn bool) {
	if l.cut {
		return
	}
	l.cut = true
	r := Report{InSync: inSync, Torn: torn}
	for i := len(l.dirOps) - 1; i >= 0; i-- {
		l.dirOps[i].undo(l)
		r.UndoneDirOps++
	}
	l.dirOps = nil
	// Files in inode order, so that a seed replays the same cut.
	inos := make([]uint64, 0, len(l.files))
	for ino := range l.files {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		f := l.files[ino]
		for _, w := range f.pending {
			r.PendingWrites++
			r.PendingBytes += len(w.data)
		}
		if !torn {
			r.Dropped += len(f.pending)
			f.pending = nil
			continue
		}
		var survivors []write
		for _, w := range f.pending {
			switch l.rng.IntN(3) {
			case 0:
				r.Dropped++
				continue
			case 1:
				if w.truncate || len(w.data) <= Sector {
					r.Whole++
					break
				}
				// A prefix ending on a sector boundary of the file.
				first := (w.off/Sector + 1) * Sector
				last := w.off + int64(len(w.data))
				var ends []int64
				for e := first; e < last; e += Sector {
					ends = append(ends, e)
				}
				if len(ends) == 0 {
					r.Whole++
					break
				}
				end := ends[l.rng.IntN(len(ends))]
				w.data = w.data[:end-w.off]
				r.Partial++
				r.PartialAt = append(r.PartialAt, w.off)
			default:
				r.Whole++
			}
			survivors = append(survivors, w)
		}
		l.rng.Shuffle(len(survivors), func(i, j int) { survivors[i], survivors[j] = survivors[j], survivors[i] })
		_ = f.apply(survivors) // what the backing file refuses is lost like the rest
		f.pending = nil
	}
	l.report = r
	close(l.cutDone)
}

// lock takes the filesystem's lock; after a cut it returns false, unlocked.
func (l *FS) lock() bool {
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		return false
	}
	return true
}

// syncLocked counts a sync and reports whether it may go ahead; false means
// the cut landed in it (or came before it).
func (l *FS) syncLocked(rel string) bool {
	if l.cut {
		return false
	}
	if l.armed > 0 && (l.armMatch == nil || l.armMatch(rel)) {
		l.armed--
		if l.armed == 0 {
			l.cutLocked(true, l.armTorn)
			l.report.SyncOf = rel
			return false
		}
	}
	return true
}

// write is one unsynced write, or a truncate to off.
type write struct {
	off      int64
	data     []byte
	truncate bool
}

// file is the state of one backing inode: its descriptor and the writes
// not synced yet, in the order they were made.
type file struct {
	fd      *os.File
	pending []write
}

func (f *file) backingSize() (int64, error) {
	st, err := f.fd.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *file) size() (int64, error) {
	size, err := f.backingSize()
	if err != nil {
		return 0, err
	}
	for _, w := range f.pending {
		if w.truncate {
			size = w.off
		} else if end := w.off + int64(len(w.data)); end > size {
			size = end
		}
	}
	return size, nil
}

// read is the file as readers see it: the backing file with the pending
// writes laid over it in order.
func (f *file) read(dest []byte, off int64) (int, error) {
	size, err := f.size()
	if err != nil {
		return 0, err
	}
	if off >= size {
		return 0, nil
	}
	n := min(int64(len(dest)), size-off)
	buf := dest[:n]
	clear(buf)
	if _, err := f.fd.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	for _, w := range f.pending {
		if w.truncate {
			if w.off < off+n {
				clear(buf[max(w.off-off, 0):])
			}
			continue
		}
		lo, hi := max(w.off, off), min(w.off+int64(len(w.data)), off+n)
		if lo < hi {
			copy(buf[lo-off:hi-off], w.data[lo-w.off:hi-w.off])
		}
	}
	return int(n), nil
}

// apply writes ws to the backing file, in the order given.
func (f *file) apply(ws []write) error {
	for _, w := range ws {
		var err error
		if w.truncate {
			err = f.fd.Truncate(w.off)
		} else {
			_, err = f.fd.WriteAt(w.data, w.off)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fileFor returns the state of the regular file at the backing path p,
// opening it the first time.
func (l *FS) fileFor(p string, st *syscall.Stat_t) (*file, error) {
	if f, ok := l.files[st.Ino]; ok {
		return f, nil
	}
	fd, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		if fd, err = os.Open(p); err != nil {
			return nil, err
		}
	}
	f := &file{fd: fd}
	l.files[st.Ino] = f
	return f, nil
}

// dirOp is a directory change not yet durable.
type dirOp struct {
	kind    string // "create", "mkdir", "rename", "unlink", "rmdir"
	dir     string // the directory whose sync makes it durable (relative)
	name    string // relative path of the new name
	old     string // rename: the old name
	stashed string // the file this change removed, kept to undo it
}

func (op *dirOp) undo(l *FS) {
	p := func(rel string) string { return filepath.Join(l.backing, rel) }
	switch op.kind {
	case "create":
		os.Remove(p(op.name))
	case "mkdir":
		os.RemoveAll(p(op.name))
	case "rmdir":
		os.Mkdir(p(op.name), 0o755)
	case "unlink":
		os.Rename(op.stashed, p(op.name))
	case "rename":
		os.Rename(p(op.name), p(op.old))
		if op.stashed != "" {
			os.Rename(op.stashed, p(op.name))
		}
	}
}

// durable drops the pending changes a sync of dir makes durable.
func (l *FS) durableLocked(dir string) {
	kept := l.dirOps[:0]
	for _, op := range l.dirOps {
		if op.dir == dir {
			if op.stashed != "" {
				os.RemoveAll(op.stashed)
			}
			continue
		}
		kept = append(kept, op)
	}
	l.dirOps = kept
}

// stashLocked moves the backing path p aside and returns where it went.
func (l *FS) stashLocked(p string) (string, error) {
	l.stashN++
	to := filepath.Join(l.stash, fmt.Sprint(l.stashN))
	return to, os.Rename(p, to)
}

// renamedLocked rewrites pending changes below a renamed directory.
func (l *FS) renamedLocked(from, to string) {
	re := func(s string) string {
		if s == from || strings.HasPrefix(s, from+"/") {
			return to + s[len(from):]
		}
		return s
	}
	for _, op := range l.dirOps {
		op.dir, op.name, op.old = re(op.dir), re(op.name), re(op.old)
	}
}

// node is a file or directory of the mount.
type node struct {
	fs.Inode
	lfs *FS
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
	_ fs.NodeWriter    = (*node)(nil)
	_ fs.NodeFsyncer   = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
)

func (n *node) rel() string { return n.Path(nil) }

func (n *node) path() string { return filepath.Join(n.lfs.backing, n.rel()) }

func (n *node) child(name string) string { return filepath.Join(n.rel(), name) }

// giveToCaller makes the caller the owner of the backing path p it just
// created through the mount: the daemon creates it as its own user (root),
// and a program such as PostgreSQL checks that its files are its own.
func giveToCaller(ctx context.Context, p string) error {
	c, ok := fuse.FromContext(ctx)
	if !ok || (int(c.Uid) == os.Geteuid() && int(c.Gid) == os.Getegid()) {
		return nil
	}
	return os.Lchown(p, int(c.Uid), int(c.Gid))
}

// newChild makes the inode of the backing path rel, which st describes.
func (n *node) newChild(ctx context.Context, rel string, st *syscall.Stat_t, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	mode := st.Mode & syscall.S_IFMT
	if mode != syscall.S_IFREG && mode != syscall.S_IFDIR {
		return nil, syscall.EACCES
	}
	var f *file
	if mode == syscall.S_IFREG {
		var err error
		if f, err = n.lfs.fileFor(filepath.Join(n.lfs.backing, rel), st); err != nil {
			return nil, fs.ToErrno(err)
		}
	}
	if err := attrOf(f, st, &out.Attr); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.NewInode(ctx, &node{lfs: n.lfs}, fs.StableAttr{Mode: mode, Ino: st.Ino}), 0
}

// attrOf fills out from st, with the size readers see when f (the state
// of a regular file; nil for a directory) has unsynced writes.
func attrOf(f *file, st *syscall.Stat_t, out *fuse.Attr) error {
	out.FromStat(st)
	if f == nil {
		return nil
	}
	size, err := f.size()
	if err != nil {
		return err
	}
	out.Size = uint64(size)
	out.Blocks = (out.Size + 511) / 512
	return nil
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.lfs.lock() {
		return nil, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	rel := n.child(name)
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(n.lfs.backing, rel), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, rel, &st, out)
}

// fileLocked is the state of this node's file; nil for a directory.
func (n *node) fileLocked() (*file, *syscall.Stat_t, error) {
	var st syscall.Stat_t
	if f, ok := n.lfs.files[n.StableAttr().Ino]; ok {
		if err := syscall.Fstat(int(f.fd.Fd()), &st); err != nil {
			return nil, nil, err
		}
		return f, &st, nil
	}
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return nil, nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, &st, nil
	}
	f, err := n.lfs.fileFor(n.path(), &st)
	return f, &st, err
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !n.lfs.lock() {
		return syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	f, st, err := n.fileLocked()
	if err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(attrOf(f, st, &out.Attr))
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.lfs.lock() {
		return syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	f, st, err := n.fileLocked()
	if err != nil {
		return fs.ToErrno(err)
	}
	if size, ok := in.GetSize(); ok {
		if f == nil {
			return syscall.EISDIR
		}
		f.pending = append(f.pending, write{off: int64(size), truncate: true})
		n.lfs.stats.Writes++
	}
	if mode, ok := in.GetMode(); ok {
		if err := os.Chmod(n.path(), os.FileMode(mode&0o7777)); err != nil {
			return fs.ToErrno(err)
		}
		st.Mode = st.Mode&syscall.S_IFMT | mode&0o7777
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u, st.Uid = int(uid), uid
		}
		if gok {
			g, st.Gid = int(gid), gid
		}
		if err := os.Lchown(n.path(), u, g); err != nil {
			return fs.ToErrno(err)
		}
	}
	return fs.ToErrno(attrOf(f, st, &out.Attr))
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if !n.lfs.lock() {
		return nil, 0, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	f, _, err := n.fileLocked()
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	if f != nil && flags&syscall.O_TRUNC != 0 {
		f.pending = append(f.pending, write{off: 0, truncate: true})
		n.lfs.stats.Writes++
	}
	// No file handle, so no backing fd for go-fuse to pass through to
	// the kernel: every read and write comes here. No FOPEN_DIRECT_IO:
	// mmap needs the page cache, and without writeback caching every
	// write still comes here at once.
	return nil, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.lfs.lock() {
		return nil, nil, 0, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	rel := n.child(name)
	p := filepath.Join(n.lfs.backing, rel)
	fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_RDWR, mode&0o7777)
	created := err == nil
	switch {
	case created:
		syscall.Close(fd)
		if err := giveToCaller(ctx, p); err != nil {
			os.Remove(p)
			return nil, nil, 0, fs.ToErrno(err)
		}
		n.lfs.dirOps = append(n.lfs.dirOps, &dirOp{kind: "create", dir: n.rel(), name: rel})
	case errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0:
		// Created meanwhile (the kernel asked on a stale negative
		// entry): open it as it is.
	default:
		return nil, nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	ch, errno := n.newChild(ctx, rel, &st, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !created && flags&syscall.O_TRUNC != 0 {
		f := n.lfs.files[st.Ino]
		f.pending = append(f.pending, write{off: 0, truncate: true})
		n.lfs.stats.Writes++
		out.Attr.Size = 0
	}
	return ch, nil, 0, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if !n.lfs.lock() {
		return nil, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	f, _, err := n.fileLocked()
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	if f == nil {
		return nil, syscall.EISDIR
	}
	k, err := f.read(dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if !n.lfs.lock() {
		return 0, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	f, _, err := n.fileLocked()
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	if f == nil {
		return 0, syscall.EISDIR
	}
	// The kernel reuses its buffer: keep a copy.
	f.pending = append(f.pending, write{off: off, data: append([]byte(nil), data...)})
	n.lfs.stats.Writes++
	return uint32(len(data)), 0
}

// Fsync makes a file's writes durable, or a directory's changes.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	n.lfs.mu.Lock()
	defer n.lfs.mu.Unlock()
	if !n.lfs.syncLocked(n.rel()) {
		return syscall.EIO
	}
	f, _, err := n.fileLocked()
	if err != nil {
		return fs.ToErrno(err)
	}
	if f == nil {
		n.lfs.stats.DirSyncs++
		n.lfs.durableLocked(n.rel())
		return 0
	}
	n.lfs.stats.Syncs++
	if err := f.apply(f.pending); err != nil {
		return fs.ToErrno(err)
	}
	f.pending = nil
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if !n.lfs.lock() {
		return nil, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	ents, err := os.ReadDir(n.path())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	list := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(n.path(), e.Name()), &st) != nil {
			continue
		}
		list = append(list, fuse.DirEntry{Name: e.Name(), Mode: st.Mode, Ino: st.Ino})
	}
	// A list stream, not go-fuse's loopback one: that one would fsync
	// the backing directory itself and never tell this package.
	return fs.NewListDirStream(list), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.lfs.lock() {
		return nil, syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	rel := n.child(name)
	p := filepath.Join(n.lfs.backing, rel)
	if err := os.Mkdir(p, os.FileMode(mode&0o777)); err != nil {
		return nil, fs.ToErrno(err)
	}
	if err := giveToCaller(ctx, p); err != nil {
		os.Remove(p)
		return nil, fs.ToErrno(err)
	}
	n.lfs.dirOps = append(n.lfs.dirOps, &dirOp{kind: "mkdir", dir: n.rel(), name: rel})
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, rel, &st, out)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if !n.lfs.lock() {
		return syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	rel := n.child(name)
	if err := syscall.Rmdir(filepath.Join(n.lfs.backing, rel)); err != nil {
		return fs.ToErrno(err)
	}
	n.lfs.dirOps = append(n.lfs.dirOps, &dirOp{kind: "rmdir", dir: n.rel(), name: rel})
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if !n.lfs.lock() {
		return syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	rel := n.child(name)
	p := filepath.Join(n.lfs.backing, rel)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	to, err := n.lfs.stashLocked(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	n.lfs.dirOps = append(n.lfs.dirOps, &dirOp{kind: "unlink", dir: n.rel(), name: rel, stashed: to})
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !n.lfs.lock() {
		return syscall.EIO
	}
	defer n.lfs.mu.Unlock()
	const renameNoReplace = 1
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, to := n.child(name), np.child(newName)
	pf, pt := filepath.Join(n.lfs.backing, from), filepath.Join(n.lfs.backing, to)
	var src syscall.Stat_t
	if err := syscall.Lstat(pf, &src); err != nil {
		return fs.ToErrno(err)
	}
	op := &dirOp{kind: "rename", dir: np.rel(), name: to, old: from}
	var dst syscall.Stat_t
	if err := syscall.Lstat(pt, &dst); err == nil {
		if flags&renameNoReplace != 0 {
			return syscall.EEXIST
		}
		if src.Ino == dst.Ino {
			return 0
		}
		if dst.Mode&syscall.S_IFMT == syscall.S_IFDIR || src.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EEXIST // a directory never replaces, nor is replaced
		}
		stashed, err := n.lfs.stashLocked(pt)
		if err != nil {
			return fs.ToErrno(err)
		}
		op.stashed = stashed
	}
	if err := os.Rename(pf, pt); err != nil {
		if op.stashed != "" {
			os.Rename(op.stashed, pt)
		}
		return fs.ToErrno(err)
	}
	if src.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.lfs.renamedLocked(from, to)
	}
	n.lfs.dirOps = append(n.lfs.dirOps, op)
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.lfs.backing, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}
