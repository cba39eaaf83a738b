// Package bolt is fenceq's bbolt engine. Each operation is one exported method
// that runs in one serializable bbolt transaction; concurrent mutations share
// commits (group commit) but never a decision: each is applied in turn inside
// the shared transaction and answered only after that transaction committed.
package bolt

import (
	"context"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/wait"
	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrLocked: another process holds the database file.
var ErrLocked = errors.New("db: database file is locked by another process")

var _ db.Store = (*Store)(nil)

// Options configure a Store. The zero value is usable: every field has a default.
type Options struct {
	// Rules are the queue rules' clock and limits, the same for every engine.
	db.Rules
	// LockTimeout is how long Open waits for another process's file lock
	// before it returns ErrLocked. Default 1s.
	LockTimeout time.Duration
	// ReadOnly opens the file read-only (shared lock); mutations fail.
	ReadOnly bool
	// MaxBatch bounds how many mutations share one commit. Default 256.
	MaxBatch int
	// MaxCommitItems bounds the work of one commit, counted in the records
	// its mutations may write (a list enqueue of 1,000 jobs counts 1,000),
	// so that every commit ends well inside a server's write timeout however
	// the mutations waiting for it are made up. A single mutation larger
	// than this is still committed, alone. Default 4096.
	MaxCommitItems int
	// SettleTime is the longest a commit waits, under load only, for the
	// callers of the previous commit to come back (see commitLoop).
	// Default 500µs; negative disables it.
	SettleTime time.Duration
	// MaxSize bounds the file's size in bytes; 0 means no bound. A commit
	// that would grow the file past it fails with db.ErrFull and writes
	// nothing; reads, and writes that fit in the file's free pages, go on.
	// On 32-bit platforms the whole file is mapped into the address space,
	// and a remap that cannot get it leaves the store unusable; this bound
	// keeps the map below what the process can get (bbolt's Options.MaxSize).
	MaxSize int
	// NoSync skips bbolt's fdatasync at each commit. It is for the
	// power-loss test's control run only (e2e/powerloss_test.go), which shows
	// that a store opened so loses acknowledged writes in a power cut.
	NoSync bool
}

func (o *Options) setDefaults() {
	o.Rules.SetDefaults()
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.MaxCommitItems <= 0 {
		o.MaxCommitItems = 4096
	}
	if o.SettleTime == 0 {
		o.SettleTime = 500 * time.Microsecond
	}
}

// Store is a job queue in one bbolt file. Its methods are safe for
// concurrent use.
type Store struct {
	bolt *bbolt.DB
	opts Options
	path string

	writes    chan *writeOp
	closing   chan struct{}
	committed chan struct{} // closed when the committer has stopped
	closeOnce sync.Once

	commits      atomic.Uint64
	committedOps atomic.Uint64

	held       *writeOp // taken by the commit loop but over the last commit's item budget; committer goroutine only
	batchItems int      // items of the batch being gathered; committer goroutine only

	waits   *wait.Waiters // long-polling claims and acquires waiting for a named lease
	onAbort []func()      // run if the commit in progress fails; committer goroutine only
}

// Open opens (creating if needed) the store at path. It returns ErrLocked
// when another process holds the file and ErrCorrupt when it is not a
// fenceq database.
func Open(path string, opts Options) (*Store, error) {
	opts.setDefaults()
	st, statErr := os.Stat(path)
	if opts.ReadOnly && statErr != nil {
		return nil, fmt.Errorf("db: open %s: %w", path, statErr)
	}
	created := errors.Is(statErr, os.ErrNotExist) && !opts.ReadOnly
	if statErr == nil && st.Size() > 0 {
		if err := checkNotCut(path, st.Size(), opts); err != nil {
			return nil, err
		}
	}
	bdb, err := openBolt(path, opts, &bbolt.Options{
		ReadOnly:     opts.ReadOnly,
		FreelistType: bbolt.FreelistMapType,
		// The freelist is not written at each commit (it is rebuilt by a
		// scan of the file at open): every commit saves sorting and writing
		// it, which grows with the free pages a sweep leaves behind.
		// Durability is unchanged: data and meta pages are synced as before.
		NoFreelistSync: true,
		MaxSize:        opts.MaxSize,
		NoSync:         opts.NoSync,
	})
	if err != nil {
		return nil, err
	}
	if created {
		// bbolt syncs a new file but not its directory entry: until the
		// directory is synced, a power cut may take the whole file, and
		// every commit acknowledged in it, away.
		if err := syncDir(filepath.Dir(path)); err != nil {
			bdb.Close()
			return nil, fmt.Errorf("db: sync the directory of %s: %w", path, err)
		}
	}
	s := &Store{bolt: bdb, opts: opts, path: path,
		writes: make(chan *writeOp), closing: make(chan struct{}), committed: make(chan struct{}), waits: wait.New()}
	if opts.ReadOnly {
		err = bdb.View(func(tx *bbolt.Tx) error {
			if tx.Bucket(bucketJobs) == nil {
				return fmt.Errorf("%w: %s has no fenceq buckets", db.ErrCorrupt, path)
			}
			// An older file is read as it is (a missing index reads as
			// empty); a newer one is refused.
			_, err := openSchema(tx, path)
			return err
		})
	} else {
		err = bdb.Update(func(tx *bbolt.Tx) error { return initFile(tx, path) })
	}
	if err != nil {
		bdb.Close()
		return nil, err
	}
	go s.commitLoop()
	return s, nil
}

// openBolt opens path with bbolt, naming what went wrong as Open does.
func openBolt(path string, opts Options, bopts *bbolt.Options) (*bbolt.DB, error) {
	bopts.Timeout = opts.LockTimeout
	bdb, err := bbolt.Open(path, 0o600, bopts)
	if err == nil {
		return bdb, nil
	}
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (gave up after %v)", ErrLocked, path, opts.LockTimeout)
	}
	if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrChecksum) {
		return nil, fmt.Errorf("%w: %s is not a fenceq database: %v", db.ErrCorrupt, path, err)
	}
	var pathErr *os.PathError
	if errors.As(err, &pathErr) && pathErr.Path == path {
		return nil, fmt.Errorf("db: %w", err) // it names the file already
	}
	return nil, fmt.Errorf("db: open %s: %w", path, err)
}

// checkNotCut refuses a file shorter than the pages its meta page says it
// holds: a copy cut short, a disk that filled during a copy. bbolt maps
// the file into memory and would read those pages past its end: the
// process died of SIGBUS, SIGSEGV or a failed page assertion, at the open
// (a read-write open rebuilds the freelist by reading every page) or at the
// first read. The meta page is read by a read-only open, which reads no
// other page.
func checkNotCut(path string, size int64, opts Options) error {
	bdb, err := openBolt(path, opts, &bbolt.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer bdb.Close()
	return bdb.View(func(tx *bbolt.Tx) error {
		if want := tx.Size(); want > size {
			return fmt.Errorf("%w: %s is %d bytes, but its pages reach to byte %d: the file was cut short (a partial copy, a full disk?); restore it from a backup",
				db.ErrCorrupt, path, size, want)
		}
		return nil
	})
}

// StopWaiting ends every wait, now and later, for a graceful shutdown: a
// long-polling claim returns at once with what it has (a job already handed
// off to it, else none), and a waiting AcquireLease returns its lease-held
// refusal, as when their waits run out. Everything else goes on until Close.
func (s *Store) StopWaiting() { s.waits.Stop() }

// syncDir fsyncs the directory dir, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Close waits for the commit in progress, refuses new mutations with
// ErrClosed, and closes the file.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.waits.Close()
	<-s.committed
	return s.bolt.Close()
}

// CommitStats reports how many commits the store made and how many
// mutations they carried, for metrics and the bench command.
func (s *Store) CommitStats() (commits, ops uint64) {
	return s.commits.Load(), s.committedOps.Load()
}

// Check runs bbolt's consistency check over the whole file and the store's
// own invariants (every index entry matches its record, counts match).
func (s *Store) Check() error {
	return s.bolt.View(func(tx *bbolt.Tx) error {
		var first error
		for err := range tx.Check() { // drain: the checker stops only when read to the end
			if first == nil {
				first = fmt.Errorf("db: bbolt check: %w", err)
			}
		}
		if first != nil {
			return first
		}
		if err := checkPauses(tx); err != nil {
			return err
		}
		if err := checkSchedules(tx); err != nil {
			return err
		}
		return checkIndexes(tx)
	})
}

// view runs fn in a read transaction.
func (s *Store) view(fn func(tx *bbolt.Tx) error) error {
	err := s.bolt.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return db.ErrClosed
	}
	return err
}

// writeOp is one mutation waiting for a shared commit.
type writeOp struct {
	m     mutation
	items int // records it may write, at least 1 (Options.MaxCommitItems)
	err   error
	done  chan struct{}
}

// update runs m inside a write transaction shared with other concurrent
// mutations and returns after that transaction committed (or failed): m's
// refusal, or the error that aborted the commit. m runs exactly once.
func (s *Store) update(ctx context.Context, m mutation) error {
	return s.updateItems(ctx, 1, m)
}

// updateItems is update for a mutation that may write up to items records.
// Until the commit loop takes it, the wait ends with ctx: a caller whose
// deadline passes while commits ahead of it run gets ctx's error and
// nothing is written.
func (s *Store) updateItems(ctx context.Context, items int, m mutation) error {
	if s.opts.ReadOnly {
		return fmt.Errorf("db: store is read-only")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	op := &writeOp{m: m, items: max(items, 1), done: make(chan struct{})}
	select {
	case s.writes <- op:
	case <-s.closing:
		return db.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once taken, the mutation will be committed or failed; wait for that
	// even if ctx ends, so the caller never reports a write as not done
	// when it was.
	<-op.done
	return op.err
}

// commitLoop starts a commit as soon as the previous one ended, taking every
// mutation that arrived meanwhile (up to MaxBatch). There is no fixed
// delay: a mutation that finds the loop idle is committed at once, so under
// light load it waits for exactly one commit. Under load, when fewer
// mutations are waiting than the previous commit released, the callers just
// answered are on their way back with their next request; the loop then
// gathers for at most SettleTime, which roughly halves the commits per
// mutation at 16 concurrent callers (docs/performance.md). A lone caller —
// a previous commit of one — never waits.
//
// How many it waits for: the callers the previous commit released, and,
// when that commit carried at least mergeMin and others were already
// waiting as it ended, those too. Without the second part, closed-loop
// callers split into two cohorts that take turns (one commits while the
// other is on its way back) and every commit carries half of them; waiting
// for both merges them. Below mergeMin (light or open-loop load, where the
// callers released do not all come back) it would only add latency.
func (s *Store) commitLoop() {
	defer close(s.committed)
	batch := make([]*writeOp, 0, s.opts.MaxBatch)
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	released := 0 // mutations the previous commit carried
	for {
		waiting := true // mutations were waiting when the last commit ended
		batch, s.batchItems = batch[:0], 0
		if op := s.held; op != nil {
			s.held = nil
			s.take(&batch, op)
		} else {
			select {
			case op := <-s.writes:
				s.take(&batch, op)
			default:
				waiting = false
				select {
				case op := <-s.writes:
					s.take(&batch, op)
				case <-s.closing:
					return
				}
			}
		}
		s.gather(&batch)
		want := released
		if waiting && released >= mergeMin {
			want += len(batch)
		}
		if want = min(want, s.opts.MaxBatch); len(batch) < want && s.opts.SettleTime > 0 {
			settle.Reset(s.opts.SettleTime)
		wait:
			for len(batch) < want && s.held == nil {
				select {
				case op := <-s.writes:
					if s.take(&batch, op) {
						s.gather(&batch)
					}
				case <-settle.C:
					break wait
				}
			}
			if !settle.Stop() {
				select { // drain a fire that raced with the last receive
				case <-settle.C:
				default:
				}
			}
		}
		released = len(batch)
		s.commitBatch(batch)
	}
}

// mergeMin is the smallest previous commit after which the loop also waits
// for the callers released by it when others are already waiting (see
// commitLoop). Closed-loop callers otherwise split into two groups that
// take turns; what merging them bought is in docs/performance.md.
const mergeMin = 4

// gather adds every mutation already waiting, up to MaxBatch mutations and
// MaxCommitItems items.
func (s *Store) gather(batch *[]*writeOp) {
	for len(*batch) < s.opts.MaxBatch && s.held == nil {
		select {
		case op := <-s.writes:
			s.take(batch, op)
		default:
			return
		}
	}
}

// take adds op to the batch unless it would carry the batch past
// MaxCommitItems; then op is held for the next commit (which it starts) and
// take reports false. A batch's first mutation is always taken.
func (s *Store) take(batch *[]*writeOp, op *writeOp) bool {
	if len(*batch) > 0 && s.batchItems+op.items > s.opts.MaxCommitItems {
		s.held = op
		return false
	}
	*batch = append(*batch, op)
	s.batchItems += op.items
	return true
}

// commitBatch runs each mutation of batch in turn in one write
// transaction: its decide step, then each step of its apply followed by the
// hand-off of the jobs that step made available (handOff). A refusal fails
// its mutation alone; an error in apply or a hand-off aborts the commit and
// fails every mutation in it. Waiters are woken only after the commit
// (handOff registers the wake-ups on the transaction).
func (s *Store) commitBatch(batch []*writeOp) {
	finish := func(err error) {
		for _, op := range batch {
			if err != nil {
				op.err = err
			}
			close(op.done)
		}
	}
	s.onAbort = s.onAbort[:0]
	abort := func(err error) {
		for _, f := range s.onAbort {
			f()
		}
		finish(err)
	}
	tx, err := s.bolt.Begin(true)
	if err != nil {
		finish(fmt.Errorf("db: begin: %w", err))
		return
	}
	setFill(tx)
	w := &writer{reader: reader{tx: tx, tail: &tail{}}}
	for _, op := range batch {
		now := s.opts.Now()
		if op.err = guard(func() error { return op.m.decide(w.reader, now) }); op.err != nil {
			continue // refused: it wrote nothing
		}
		w.now = now
		for step, more := 0, true; more; step++ {
			err := guard(func() (err error) {
				more, err = op.m.apply(w, step)
				return err
			})
			if err == nil {
				err = s.handOff(w)
			}
			if err != nil {
				_ = tx.Rollback()
				abort(err)
				return
			}
		}
	}
	if err := w.flush(); err != nil {
		_ = tx.Rollback()
		abort(err)
		return
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, berrors.ErrMaxSizeReached) {
			err = fmt.Errorf("%w of %d bytes", db.ErrFull, s.opts.MaxSize)
		}
		abort(fmt.Errorf("db: commit: %w", err))
		return
	}
	s.commits.Add(1)
	s.committedOps.Add(uint64(len(batch)))
	finish(nil)
}

// guard turns a panic in a mutation into an error: in decide it fails
// that mutation, in apply it aborts the commit.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("db: internal error: %v", r)
		}
	}()
	return fn()
}

// Ping reports whether the store is open. It opens no transaction: a
// read transaction waits behind a commit that grows the file's memory
// map, which waits for every read transaction open (a backup streaming to
// a slow client holds one until its stall timeout), and a server that is
// only waiting for that is still ready.
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.closing:
		return db.ErrClosed
	default:
	}
	return ctx.Err()
}

// Reopen closes the store and opens its file again with the same options,
// for tests of what outlives a restart (dbtest.Reopener).
func (s *Store) Reopen() (db.Store, error) {
	if err := s.Close(); err != nil {
		return nil, err
	}
	return Open(s.path, s.opts)
}
