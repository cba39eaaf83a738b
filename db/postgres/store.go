// Package postgres is fenceq's PostgreSQL engine: several fenceq processes
// (replicas) over one database, with the rules of package db. Each
// operation is one PostgreSQL transaction; concurrent mutations of one
// replica share a transaction (group commit), decided in order against the
// batch's view of the rows it read at its start and written at its end
// with one statement per kind (batchView); one request's SQL error fails
// the batch, which then runs each of its requests alone, so that it never
// fails the others. Every mutation
// appends to the one audit chain, whose head row a batch locks after every
// other lock its mutations could wait for (taken in one order, opPlan) and
// holds to its commit: at the end of its first round trip if no other
// replica's batch holds it (then the batch ends in one more), else after
// writing its job rows (then in two more). Replicas' batches take their
// locks, read and write their rows at once, and only their appends to the
// chain and their commits take turns. A batch that holds the head waits
// for nothing more, so that overlapping batches cannot deadlock.
// Time is the database's clock (clock_timestamp() at the batch's start),
// so replicas whose own clocks drift agree on when a lease ends.
// Long-polls across replicas are woken by LISTEN/NOTIFY.
package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/wait"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var _ db.Store = (*Store)(nil)
var _ db.Backuper = (*Store)(nil)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configure a Store. The zero value is usable.
type Options struct {
	// Rules are the queue rules' clock and limits, the same for every
	// engine. The clock is the database's (clock_timestamp()); Rules.Now,
	// when set, is a test's clock, used in its place so that a test moves
	// time for every replica of one database at once.
	db.Rules
	// MaxBatch bounds how many mutations share one transaction. Default
	// 500: a batch's statements do not grow with it (batchView), and it
	// must still commit well within a request's deadline.
	MaxBatch int
	// MaxConns is the connection pool's size. Default 16.
	MaxConns int32
	// ConnectTimeout bounds the first connection at Open. Default 10s.
	ConnectTimeout time.Duration
	// CloseTimeout bounds how long Close waits for the batch in progress
	// (then it is cut: its callers are answered unavailable, the outcome
	// unknown) and then for connections still busy (then they are left
	// behind). A database that stopped answering cannot hold a shutdown
	// longer. Default 1s.
	CloseTimeout time.Duration
	// LocalClockSkew is for tests only: it moves this replica's host clock
	// (Rules.Now's default, the clock the bbolt engine judges leases by)
	// by the given amount, to show that this engine never judges a lease
	// by it.
	LocalClockSkew time.Duration
	// NoEarlyRead turns off reading what a batch will need before its
	// requests come (early.go). Default: on.
	NoEarlyRead bool
	// NoGatherWait turns off a batch's wait for the callers the previous
	// batch answered (gather.go). Default: on.
	NoGatherWait bool
	// GatherWait bounds that wait (tests: longer than a test's steps).
	// Default 5ms (maxGatherWait).
	GatherWait time.Duration
	// EarlyWindow is how long an early read waits for its batch (tests:
	// longer than a test's steps). Default 5ms (earlyWindow).
	EarlyWindow time.Duration
	// Version is this build's release version (vMAJOR.MINOR.PATCH), held
	// against the database's minimum writer version: a build below it is
	// refused at Open and stops serving when the minimum rises while it
	// runs (schema.go). "" (tests) is never below it.
	Version string
}

func (o *Options) setDefaults() {
	o.Rules.SetDefaults()
	if o.MaxBatch <= 0 {
		o.MaxBatch = 500
	}
	if o.GatherWait <= 0 {
		o.GatherWait = maxGatherWait
	}
	if o.EarlyWindow <= 0 {
		o.EarlyWindow = earlyWindow
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = time.Second
	}
}

// Store is a job queue in a PostgreSQL database, shared with other
// replicas. Its methods are safe for concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	opts      Options
	testClock bool   // opts.Now was given: the rules read it instead of the database
	shard     int16  // this replica's row in the sharded counters
	channel   string // the NOTIFY channel of the replicas of this schema

	writes  chan *writeOp
	closing chan struct{}
	// stopped ends every batch's context: Close cuts the batch in
	// progress with it once its CloseTimeout has passed.
	stopped   context.Context
	stop      context.CancelFunc
	committed chan struct{}
	listened  chan struct{}
	listening chan struct{} // closed once the listener has first listened
	closeOnce sync.Once
	closeDone chan struct{} // closed when the first Close returns, with closeErr
	closeErr  error
	closed    atomic.Bool

	commits      atomic.Uint64
	committedOps atomic.Uint64
	trips        atomic.Uint64 // round trips of the batches' transactions
	stmts        atomic.Uint64 // statements of the batches' transactions
	// Early reads (early.go): the one waiting for its batch, how many
	// served one and how many did not, and their round trips and
	// statements (not in trips and stmts: none is a batch's wait).
	earlyMu                sync.Mutex
	early                  *earlyBegin
	earlyHits, earlyMisses atomic.Uint64
	earlyTrips, earlyStmts atomic.Uint64
	lastSeq                uint64        // the audit head's seq after this replica's last batch (commit loop)
	earlyPrev              batchNeed     // the rows and claims of the last batch that claimed jobs (commit loop)
	earlyBackoff           skipBackoff   // claiming batches to skip before the next early read (earlyMissed)
	retries                atomic.Uint64 // mutations or batches run again after a deadlock or serialization failure
	// headHeld sums, over headBatches batches, the time from the audit
	// head's lock reaching this replica to the commit's answer: a lower
	// bound on how long each batch kept every replica's appends waiting.
	headHeld    atomic.Int64
	headBatches atomic.Uint64

	waits   *wait.Waiters       // long-polling claims and acquires waiting for a named lease
	counted map[countedKey]bool // listener goroutine only (dispatch)

	gate *schemaGate // a newer schema seen: this replica serves nothing (schema.go)
}

// IsURL reports whether dsn names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a file.
func IsURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open connects to the database at url, applies the schema migrations it
// lacks (in one transaction, under an advisory lock, so that replicas
// starting together do not race) and starts the store. It refuses a
// malformed URL, a server it cannot reach or log in to, and a database
// whose minimum writer version is above opts.Version (ErrSchemaNewer),
// each with a message that says which. A schema migrated further than this
// build knows by a newer build is served while the minimum allows.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	testClock := opts.Now != nil
	if !testClock && opts.LocalClockSkew != 0 {
		skew := opts.LocalClockSkew
		opts.Now = func() time.Time { return time.Now().Add(skew) }
	}
	opts.setDefaults()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("db: postgres: the database URL is malformed: %v", redact(err))
	}
	cfg.MaxConns = opts.MaxConns
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	cfg.ConnConfig.RuntimeParams["application_name"] = "fenceq"
	// The batches' statements are planned once per connection, not at
	// every run: their plans do not depend on the values (rows by id,
	// arrays of one batch), and planning them anew each time cost a
	// quarter of PostgreSQL's CPU on them. A URL that sets the mode keeps
	// its own.
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	gate := &schemaGate{build: opts.Version}
	gate.seen.Store(int64(SchemaVersion())) // migrate brings it there, or further
	cfg.PrepareConn = gate.prepareConn
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("db: postgres: %v", redact(err))
	}
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, connectError(cfg.ConnConfig, err)
	}
	rep, err := migrate(cctx, pool, opts.Version, false)
	if err != nil {
		pool.Close()
		return nil, err
	}
	_ = gate.saw(int64(rep.To), rep.MinWriter)
	// Replicas share a channel per schema: several fenceq databases may
	// live in schemas of one PostgreSQL database (search_path).
	var schema string
	if err := pool.QueryRow(cctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, connectError(cfg.ConnConfig, err)
	}
	channel := notifyChannel(schema)
	s := &Store{pool: pool, opts: opts, testClock: testClock, shard: int16(rand.IntN(countShards)), channel: channel,
		writes: make(chan *writeOp), closing: make(chan struct{}), committed: make(chan struct{}),
		listened: make(chan struct{}), listening: make(chan struct{}), closeDone: make(chan struct{}),
		waits: wait.New(), counted: map[countedKey]bool{}}
	s.stopped, s.stop = context.WithCancel(context.Background())
	s.gate = gate
	go s.commitLoop()
	go s.listen(cfg.ConnConfig)
	// Serve only once other replicas' notifications reach this one.
	select {
	case <-s.listening:
	case <-cctx.Done():
		s.Close()
		return nil, fmt.Errorf("db: postgres: LISTEN did not start within %v", opts.ConnectTimeout)
	}
	return s, nil
}

// notifyChannel is the NOTIFY channel of the replicas of schema: "fenceq"
// in schema public, else "fenceq." and the schema's name, as every
// earlier build named it (a replica of the previous build hears this one).
// A channel is an identifier, at most 63 bytes (pg_notify refuses a longer
// one; LISTEN would cut it): a schema name too long for that gets
// "fenceq#" and a hash of the whole name instead, which fits and stays
// apart from every other schema's channel.
func notifyChannel(schema string) string {
	if schema == "public" {
		return "fenceq"
	}
	if c := "fenceq." + schema; len(c) <= maxIdentifier {
		return c
	}
	sum := sha256.Sum256([]byte(schema))
	return "fenceq#" + hex.EncodeToString(sum[:16])
}

// maxIdentifier is PostgreSQL's longest identifier in bytes (NAMEDATALEN-1).
const maxIdentifier = 63

// countShards is how many rows each counter (of jobs per queue and state,
// of audit actions) is spread over; each replica writes one, picked at
// random, so that two replicas rarely share one.
const countShards = 64

// connectError says why the first connection failed: the server refused
// or could not be reached, or it turned the login down.
func connectError(cfg *pgx.ConnConfig, err error) error {
	where := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("db: postgres: %s refused the login of user %q: %s", where, cfg.User, pe.Message)
		case "3D000":
			return fmt.Errorf("db: postgres: %s: %s; create it first (createdb)", where, pe.Message)
		}
		return fmt.Errorf("db: postgres: %s: %s (SQLSTATE %s)", where, pe.Message, pe.Code)
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return fmt.Errorf("db: postgres: cannot connect to %s: %v (is PostgreSQL running and listening there?)", where, op.Err)
	}
	return fmt.Errorf("db: postgres: cannot connect to %s: %v", where, redact(err))
}

// redact keeps a password that a driver error quotes out of messages.
func redact(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 {
		if at := strings.Index(msg[i:], "@"); at > 0 {
			if c := strings.Index(msg[i+3:i+at], ":"); c >= 0 {
				msg = msg[:i+3+c+1] + "xxxxx" + msg[i+at:]
			}
		}
	}
	return msg
}

// SchemaVersion is the newest schema this build knows: the number of its
// migrations.
func SchemaVersion() int {
	names, _ := migrationNames()
	return len(names)
}

func migrationNames() ([]string, error) {
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// migrationLock is the advisory lock key under which migrations run.
const migrationLock = 0x66656e6365710001 // "fenceq" 0001

// Migration is one step of a migration: a numbered SQL file of this build.
type Migration struct {
	Version int    // the schema version it brings the database to
	Name    string // its file name, 0004_observations.sql
	SQL     string
	// RaisesMinWriter: the migration brings in what older builds cannot
	// honour, and raises the minimum writer version to this build's.
	RaisesMinWriter bool
}

// MigrateReport says what a migration found and did (or, dry, would do).
type MigrateReport struct {
	From, To  int         // schema versions before and after
	Steps     []Migration // the migrations applied (or to apply), in order
	MinWriter string      // the minimum writer version after
}

// raisesMinWriterMark is the line a migration carries when it raises the
// minimum writer version (docs/operations.md).
const raisesMinWriterMark = "-- fenceq: raises the minimum writer version"

// Migrate applies the schema migrations the database at url lacks, as
// Open does at start, and reports them; with dryRun it changes nothing and
// reports the migrations it would apply. It refuses what Open refuses: a
// database whose minimum writer version is above opts.Version.
func Migrate(ctx context.Context, url string, opts Options, dryRun bool) (MigrateReport, error) {
	opts.setDefaults()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return MigrateReport{}, fmt.Errorf("db: postgres: the database URL is malformed: %v", redact(err))
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	cfg.ConnConfig.RuntimeParams["application_name"] = "fenceq migrate"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return MigrateReport{}, fmt.Errorf("db: postgres: %v", redact(err))
	}
	defer pool.Close()
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(cctx); err != nil {
		return MigrateReport{}, connectError(cfg.ConnConfig, err)
	}
	return migrate(ctx, pool, opts.Version, dryRun)
}

// migrate applies the migrations the database lacks, all in one
// transaction under an advisory lock: a replica that starts while another
// migrates waits, then finds the schema current. A database migrated
// further than this build knows is left as it is: a newer build's
// migrations only expand the schema, and its minimum writer version says
// whether this build may still write. dryRun rolls the transaction back
// before any migration runs.
func migrate(ctx context.Context, pool *pgxpool.Pool, build string, dryRun bool) (MigrateReport, error) {
	// A migration that alters a table the running replicas write (an
	// older build's batches, during a rolling upgrade) can meet one of
	// them in a deadlock, which PostgreSQL breaks by failing one side:
	// the migration's transaction then rolled back whole, so it is run
	// again.
	for attempt := 1; ; attempt++ {
		rep, err := migrateOnce(ctx, pool, build, dryRun)
		if !retryable(err) || attempt == migrateAttempts {
			return rep, err
		}
		select {
		case <-ctx.Done():
			return rep, err
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// migrateAttempts bounds how often migrate runs a migration that failed
// in a deadlock.
const migrateAttempts = 5

// migrateOnce is one attempt of migrate, in one transaction.
func migrateOnce(ctx context.Context, pool *pgxpool.Pool, build string, dryRun bool) (MigrateReport, error) {
	var rep MigrateReport
	names, err := migrationNames()
	if err != nil {
		return rep, err
	}
	errDry := errors.New("dry run")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return fmt.Errorf("db: postgres: migration lock: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('fenceq_schema') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("db: postgres: schema table: %w", err)
		}
		have := 0
		if exists {
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM fenceq_schema`).Scan(&have); err != nil {
				return fmt.Errorf("db: postgres: schema version: %w", err)
			}
		}
		rep.From, rep.To = have, max(have, len(names))
		for v := have + 1; v <= len(names); v++ {
			sql, err := migrations.ReadFile("migrations/" + names[v-1])
			if err != nil {
				return err
			}
			rep.Steps = append(rep.Steps, Migration{Version: v, Name: names[v-1], SQL: string(sql),
				RaisesMinWriter: strings.Contains(string(sql), raisesMinWriterMark)})
		}
		if dryRun {
			if have >= minWriterSchema {
				if err := tx.QueryRow(ctx, `SELECT min_writer FROM fenceq_audit_head WHERE id = 1`).Scan(&rep.MinWriter); err != nil {
					return fmt.Errorf("db: postgres: minimum writer version: %w", err)
				}
			}
			return errDry
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fenceq_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("db: postgres: schema table: %w", err)
		}
		raise := false
		for _, m := range rep.Steps {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("db: postgres: migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO fenceq_schema (version) VALUES ($1)`, m.Version); err != nil {
				return err
			}
			raise = raise || m.RaisesMinWriter
		}
		if err := tx.QueryRow(ctx, `SELECT min_writer FROM fenceq_audit_head WHERE id = 1`).Scan(&rep.MinWriter); err != nil {
			return fmt.Errorf("db: postgres: minimum writer version: %w", err)
		}
		if raise && build != "" && versionLess(rep.MinWriter, build) {
			if _, err := tx.Exec(ctx, `UPDATE fenceq_audit_head SET min_writer = $1 WHERE id = 1`, build); err != nil {
				return fmt.Errorf("db: postgres: minimum writer version: %w", err)
			}
			rep.MinWriter = build
		}
		return minWriterError(build, rep.MinWriter, have)
	})
	if errors.Is(err, errDry) {
		err = minWriterError(build, rep.MinWriter, rep.From)
	}
	return rep, err
}

// minWriterSchema is the schema version that brought the minimum writer
// version (0005_min_writer.sql).
const minWriterSchema = 5

// minWriterError refuses a build below the database's minimum writer
// version, naming both, as ErrSchemaNewer.
func minWriterError(build, minWriter string, schema int) error {
	if build == "" || minWriter == "" || !versionLess(build, minWriter) {
		return nil
	}
	return fmt.Errorf("%w: the PostgreSQL database (schema version %d) requires fenceq %s or newer to write to it (its minimum writer version); this fenceq is %s: run %s or newer", db.ErrSchemaNewer, schema, minWriter, build, minWriter)
}

// Close refuses new requests with db.ErrClosed, waits for the batch in
// progress and closes the pool. A database that stopped answering does
// not hold it: after Options.CloseTimeout the batch is cut (its callers
// are answered unavailable, the outcome unknown), and connections still
// busy after another CloseTimeout are left behind, with an error that
// says so. Later calls return the first one's answer.
func (s *Store) Close() error {
	first := false
	s.closeOnce.Do(func() { close(s.closing); s.closed.Store(true); first = true })
	if !first {
		<-s.closeDone
		return s.closeErr
	}
	defer close(s.closeDone)
	s.closeErr = s.close()
	return s.closeErr
}

func (s *Store) close() error {
	s.waits.Close()
	grace := time.NewTimer(s.opts.CloseTimeout)
	defer grace.Stop()
	select {
	case <-s.committed:
	case <-grace.C:
		s.stop()
		<-s.committed // at once: the batch's statements end with its context
	}
	s.stop()
	<-s.listened
	pooled := make(chan struct{})
	go func() { s.pool.Close(); close(pooled) }()
	select {
	case <-pooled:
		return nil
	case <-time.After(s.opts.CloseTimeout):
		return fmt.Errorf("db: postgres: %d connections still waiting for the database %v after close: left behind", s.pool.Stat().AcquiredConns(), s.opts.CloseTimeout)
	}
}

// StopWaiting ends every wait of this replica, now and later, for a
// graceful shutdown: a long-polling claim returns at once with what it has
// (a job already handed off to it, else none), and a waiting AcquireLease
// returns its lease-held refusal, as when their waits run out. Everything
// else goes on until Close.
func (s *Store) StopWaiting() { s.waits.Stop() }

// CommitStats reports how many transactions that wrote the store
// committed and how many mutations they carried. A batch that wrote
// nothing (claims that found nothing) is not one: its COMMIT flushes
// nothing to disk.
func (s *Store) CommitStats() (commits, ops uint64) {
	return s.commits.Load(), s.committedOps.Load()
}

// Backup refuses: a PostgreSQL database is backed up with its own tools.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	return 0, db.Errorf(db.CodeConflict, "this server keeps its queue in PostgreSQL, which /v1/backup cannot snapshot: back the database up with pg_dump (for example pg_dump --format=custom --file fenceq.dump DBNAME), or with the server's own backups")
}

// Ping reports whether the database answers and has a schema this build
// knows: a replica that meets a schema migrated by a newer build is not
// ready (schema.go).
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.closing:
		return db.ErrClosed
	default:
	}
	var v int64
	var minWriter string
	if err := s.pool.QueryRow(context.WithValue(ctx, gateKey{}, true), gateSQL).Scan(&v, &minWriter); err != nil {
		return s.readError(err)
	}
	return s.gate.saw(v, minWriter)
}

// clockArg is parameter $1 of nowSQL: NULL, for the database's clock, or
// the test clock's reading in Unix nanoseconds.
func (s *Store) clockArg() any {
	if !s.testClock {
		return nil
	}
	return s.opts.Now().UnixNano()
}

// nowSQL is the rules' clock in Unix nanoseconds: the database's clock
// (clock_timestamp(), the same for every replica), or a test's clock given
// as parameter $1.
const nowSQL = `coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000)`

type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readError maps an error of a read to what callers see: a database that
// cannot be reached is CodeUnavailable.
func (s *Store) readError(err error) error {
	if err == nil {
		return nil
	}
	if db.IsRefusal(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	select {
	case <-s.closing:
		return db.ErrClosed
	default:
	}
	if isConnError(err) {
		return db.Errorf(db.CodeUnavailable, "postgresql is unavailable: %v; retry when it is back", redact(err))
	}
	if outdated := s.recheckSchema(err); outdated != nil {
		return outdated
	}
	return err
}

// isConnError reports whether err means the database could not be reached
// or went away (as opposed to a statement it refused).
func isConnError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || pe.Code == "53300"
	}
	return !db.IsRefusal(err) && !errors.Is(err, db.ErrCorrupt)
}

// retryable reports whether a statement failed for a reason that another
// attempt in a new transaction may not meet: a deadlock or a serialization
// failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, errEarlyStale) || errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// writeOp is one mutation waiting for a shared transaction. fn must set its
// results (never append to outer state): a batch that is retried runs it
// again.
type writeOp struct {
	fn    func(w *writer) error
	plan  opPlan
	err   error
	tries int
	back  bool // its caller will likely call again at once (writer.back)
	done  chan struct{}
	// deadline is the caller's: a batch ends by its mutations' earliest
	// (zero: none).
	deadline time.Time
}

// opPlan is what a mutation will lock or create, declared before its batch
// starts. A batch takes every lock its mutations could wait for at its
// start, in one order shared by every replica (named locks by key, then
// job rows by id), and the audit head last; the mutations themselves then
// wait for nothing (claims skip locked rows), so that replicas' batches,
// which overlap, cannot deadlock.
type opPlan struct {
	jobs []uint64 // job rows it changes by id
	keys []string // names it must hold alone: idempotency keys, lease names, pauses
	// What the batch reads for it at its start, in the same round trip:
	inserts int              // at most this many new jobs (ids from the sequence)
	idem    []idemPair       // the jobs holding these idempotency keys
	claim   *db.ClaimRequest // the candidates of a claim (normalized)
	// caller names who sent it (principal and worker), for a mutation
	// whose caller may call again as soon as it is answered (gatherWait).
	caller string
	// early: the mutation may be decided in a transaction begun before it
	// arrived, as of that begin's time (early.go): its outcome depends on
	// the time only through claims, which use such a transaction only when
	// no job could become due or expire in between.
	early bool
}

// Names of opPlan.keys, each a transaction-level advisory lock.
func idemKey(queue, key string) string { return "k\x00" + queue + "\x00" + key }
func leaseKey(name string) string      { return "l\x00" + name }

// pauseKey serializes pauses and resumes of every queue: the limit on
// paused queues counts them all.
const pauseKey = "p"

// lockKey is the advisory lock of a plan's key. Two names that share one
// only wait for each other.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// update runs fn inside a transaction shared with other concurrent
// mutations of this replica and returns after that transaction committed
// (or failed). fn locks nothing it can wait for.
func (s *Store) update(ctx context.Context, fn func(w *writer) error) error {
	return s.updatePlan(ctx, opPlan{}, fn)
}

// updatePlan is update for a mutation that locks or creates what plan
// says; fn may lock nothing more that it can wait for.
func (s *Store) updatePlan(ctx context.Context, plan opPlan, fn func(w *writer) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.gate.err(); err != nil {
		return err
	}
	op := &writeOp{fn: fn, plan: plan, done: make(chan struct{})}
	op.deadline, _ = ctx.Deadline()
	select {
	case s.writes <- op:
	case <-s.closing:
		return db.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-op.done // once taken, committed or failed: never reported as not done when it was
	return op.err
}

// commitLoop runs one batch at a time: every mutation waiting when the
// previous batch ended, up to MaxBatch.
func (s *Store) commitLoop() {
	defer close(s.committed)
	defer s.dropEarly()
	var retry []*writeOp
	expire := time.NewTimer(time.Hour)
	defer expire.Stop()
	gw := gatherWait{waits: time.NewTimer(time.Hour)}
	defer gw.waits.Stop()
	for {
		batch := retry
		retry = nil
		if len(batch) == 0 {
			var expired <-chan time.Time
			if at := s.earlyDeadline(); !at.IsZero() {
				expire.Reset(time.Until(at))
				expired = expire.C
			}
			select {
			case op := <-s.writes:
				batch = append(batch, op)
			case <-expired:
				s.dropEarly()
				continue
			case <-s.closing:
				return
			}
		}
	gather:
		for len(batch) < s.opts.MaxBatch {
			select {
			case op := <-s.writes:
				batch = append(batch, op)
			default:
				break gather
			}
		}
		batch = s.gatherCallers(&gw, batch)
		start := time.Now()
		retry = s.commitBatch(batch)
		gw.answered(batch, time.Since(start))
	}
}

// writer is what a mutation writes through: the batch's transaction and
// view of its job rows, the batch's time, and what it leaves for the end
// of the batch (audit events, count changes, notifications), kept apart
// per mutation so that one that fails leaves nothing.
type writer struct {
	ctx context.Context
	tx  sqlTx
	now time.Time
	s   *Store
	// v is the batch's view of the job rows it holds: a mutation reads
	// and changes its rows there, and the batch writes them at its end.
	v       *batchView
	events  []db.AuditEvent
	counts  map[countKey]int64
	notify  []string
	claimed []string // queues it claimed jobs of
	paused  []string // queues it paused
	back    bool     // its caller will likely call again at once: it completed or failed a job, or claimed one
	after   []func() // after the commit
	onAbort []func() // when this mutation or its batch is rolled back
}

type countKey struct {
	queue string
	state db.State
}

func (w *writer) count(queue string, state db.State, delta int64) {
	if w.counts == nil {
		w.counts = map[countKey]int64{}
	}
	w.counts[countKey{queue, state}] += delta
}

func (w *writer) audit(e db.AuditEvent) { w.events = append(w.events, e) }

// commitBatch runs batch in one transaction and answers each mutation once
// it committed. It returns the mutations to run again in a new transaction
// (a deadlock or serialization failure).
//
// The mutations decide in order against the batch's view of its rows and
// write nothing but through it (and statements of their own that come
// after their decision: a refusal has written nothing); the job rows are
// written at the end, one statement per kind. A fault (a statement
// PostgreSQL refuses, in a mutation or in the batch's writes) fails the
// transaction: the batch then runs each of its mutations alone, so that
// only the one at fault fails, and no savepoint is needed.
func (s *Store) commitBatch(batch []*writeOp) (retry []*writeOp) {
	if batch = s.dropLate(batch); len(batch) == 0 {
		return nil
	}
	ctx, cancel := s.batchContext(batch)
	defer cancel()
	finish := func(err error) {
		for _, op := range batch {
			if err != nil {
				op.err = err
			}
			close(op.done)
		}
	}
	var (
		tx  *batchTx
		now time.Time
		v   *batchView
		err error
	)
	// A connection the pool still holds may have died with a restart of
	// the server: nothing was applied yet, so one more attempt is safe.
	for attempt := 0; attempt < 2; attempt++ {
		tx, now, v, err = s.beginBatch(ctx, batch)
		if err == nil || !isConnError(err) {
			break
		}
	}
	if err != nil {
		if retryable(err) {
			s.retries.Add(1)
			return batch
		}
		if len(batch) > 1 && !isConnError(err) {
			return s.alone(batch)
		}
		finish(s.writeError(err))
		return nil
	}
	var all writer
	all.ctx, all.tx, all.now, all.v = ctx, tx, now, v
	abort := func() {
		s.endBatch(tx)
		for _, f := range all.onAbort {
			f()
		}
	}
	for _, op := range batch {
		w := &writer{ctx: ctx, tx: tx, now: now, s: s, v: v}
		mark := len(v.undo)
		op.err = runOp(op.fn, w)
		op.back = w.back
		if op.err == nil {
			all.events = append(all.events, w.events...)
			for k, d := range w.counts {
				all.count(k.queue, k.state, d)
			}
			all.notify = append(all.notify, w.notify...)
			all.claimed = append(all.claimed, w.claimed...)
			all.paused = append(all.paused, w.paused...)
			all.after = append(all.after, w.after...)
			all.onAbort = append(all.onAbort, w.onAbort...)
			continue
		}
		v.rollback(mark)
		for _, f := range w.onAbort {
			f()
		}
		if db.IsRefusal(op.err) {
			continue // decided before it wrote: nothing of it is left
		}
		// A fault: the transaction may have failed with it.
		abort()
		if retryable(op.err) && op.tries < 3 {
			op.tries++
			s.retries.Add(1)
			return batch
		}
		if len(batch) > 1 && !isConnError(op.err) {
			return s.alone(batch)
		}
		finish(s.writeError(op.err))
		return nil
	}
	for k, d := range v.counts {
		all.count(k.queue, k.state, d)
	}
	wrote := len(all.events) > 0 || hasCounts(all.counts) || len(all.notify) > 0 || len(v.dirty) > 0
	committed, err := s.finishBatch(&all)
	if err != nil && !committed {
		abort()
		if retryable(err) || errors.Is(err, errPausedMeanwhile) {
			s.retries.Add(1)
			return batch
		}
		if len(batch) > 1 && !isConnError(err) {
			return s.alone(batch)
		}
		finish(s.writeError(err))
		return nil
	}
	if err != nil {
		abort()
		for _, op := range batch {
			op.err = commitError(s, err)
			close(op.done)
		}
		return nil
	}
	s.endBatch(tx)
	if wrote {
		s.commits.Add(1)
		s.committedOps.Add(uint64(len(batch)))
	}
	for _, op := range batch {
		close(op.done)
	}
	for _, f := range all.after {
		f()
	}
	s.beginEarly(tx, v, len(all.events))
	return nil
}

// alone runs each mutation of a batch that failed in a transaction of its
// own, in order: the one at fault fails alone. Rare, so not fast.
func (s *Store) alone(batch []*writeOp) []*writeOp {
	s.retries.Add(1)
	for _, op := range batch {
		for r := []*writeOp{op}; len(r) > 0; {
			r = s.commitBatch(r)
		}
	}
	return nil
}

// batchContext is the context of a batch's statements: it ends at the
// earliest deadline of its callers, which are answered by then even when
// the database stopped answering (none waits for a reply past its own
// deadline, and a caller whose deadline passed is answered 503 before its
// reply would be cut), and when Close cuts the batch.
func (s *Store) batchContext(batch []*writeOp) (context.Context, context.CancelFunc) {
	var first time.Time
	for _, op := range batch {
		if !op.deadline.IsZero() && (first.IsZero() || op.deadline.Before(first)) {
			first = op.deadline
		}
	}
	if first.IsZero() {
		return context.WithCancel(s.stopped)
	}
	return context.WithDeadline(s.stopped, first)
}

// minCommitTime is the least time before its caller's deadline that a
// mutation must have left to join a batch: one that waited for its turn
// until its deadline all but passed is answered at once, not applied,
// instead of cutting short the batch of the others (batchContext).
const minCommitTime = 50 * time.Millisecond

// dropLate answers the mutations of batch with less than minCommitTime
// left before their deadline and returns the others.
func (s *Store) dropLate(batch []*writeOp) []*writeOp {
	keep := batch[:0]
	for _, op := range batch {
		if !op.deadline.IsZero() && time.Until(op.deadline) < minCommitTime {
			op.err = db.Errorf(db.CodeUnavailable, "the request's deadline came before its turn to commit: it was not applied; retry")
			close(op.done)
			continue
		}
		keep = append(keep, op)
	}
	return keep
}

// errPausedMeanwhile: a queue the batch claimed from was paused by another
// replica's commit after the batch's claims looked; the batch runs again,
// and its claims then see the pause.
var errPausedMeanwhile = errors.New("db: postgres: a queue was paused during the batch")

// commitError is the answer when COMMIT itself failed: if the connection
// went, the outcome is unknown.
func commitError(s *Store, err error) error {
	if isConnError(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return db.Errorf(db.CodeUnavailable, "postgresql went away during the commit (%v): the request may or may not have been applied; retry it (with an idempotency key for enqueues)", redact(err))
	}
	return fmt.Errorf("db: postgres: commit: %w", err)
}

// writeError maps an error of a mutation to what its caller sees.
func (s *Store) writeError(err error) error {
	if err == nil || db.IsRefusal(err) {
		return err
	}
	select {
	case <-s.closing:
		return db.ErrClosed
	default:
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return db.Errorf(db.CodeUnavailable, "postgresql did not answer before the request's deadline: the request was not applied; retry")
	}
	if isConnError(err) {
		return db.Errorf(db.CodeUnavailable, "postgresql is unavailable: %v; the request was not applied, retry when it is back", redact(err))
	}
	if outdated := s.recheckSchema(err); outdated != nil {
		return outdated
	}
	return fmt.Errorf("db: postgres: %w", err)
}

// runOp turns a panic in a mutation into its error.
func runOp(fn func(w *writer) error, w *writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("db: internal error: %v", r)
		}
	}()
	return fn(w)
}

// beginBatch starts a batch's transaction in one round trip: BEGIN, the
// batch's time, then the locks its mutations declared, named locks in key
// order and then job rows in id order (see opPlan), and what its
// mutations will read: ids for its new jobs, the jobs holding the
// idempotency keys its enqueues name, for its claims the promotion of due
// scheduled jobs and their candidates, in one statement for all of them,
// and last the audit head, locked to the commit, and the paused queues.
//
// The time is read at the start, before any lock, and may be a little
// older than the commit. That is safe: every decision about one job (or
// named lease) is serialized by its row (or advisory) lock, taken after
// the time was read, so a batch never decides with a time older than one
// it could not see; and a time read early only makes a lease look live
// longer and a scheduled job not yet due, never a lease expired early.
// The audit chain's times are kept from stepping back in finishBatch.
func (s *Store) beginBatch(ctx context.Context, batch []*writeOp) (*batchTx, time.Time, *batchView, error) {
	need := needOf(batch)
	if e := s.takeEarly(); e != nil {
		if tx, now, v, err := s.useEarly(e, need); err == nil && tx != nil {
			return tx, now, v, nil
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	tx := &batchTx{conn: conn, trips: &s.trips, stmts: &s.stmts, need: need}
	br := s.sendBegin(ctx, tx, need)
	now, v, err := readBegin(br, tx, need)
	if err != nil {
		s.endBatch(tx)
		return nil, time.Time{}, nil, err
	}
	return tx, now, v, nil
}

// batchNeed is what a batch locks and reads at its start: the sum of its
// mutations' plans.
type batchNeed struct {
	jobs, keys   []int64 // sorted, without repeats (jobs)
	inserts      int
	idemQ, idemK []string
	claimQueues  []string
	limits       map[string]int
	// early: every mutation may be decided as of an early begin's time
	// (opPlan.early).
	early bool
}

func needOf(batch []*writeOp) batchNeed {
	n := batchNeed{limits: map[string]int{}, early: true}
	for _, op := range batch {
		n.early = n.early && op.plan.early
		for _, id := range op.plan.jobs {
			if id <= 1<<63-1 {
				n.jobs = append(n.jobs, int64(id))
			}
		}
		for _, k := range op.plan.keys {
			n.keys = append(n.keys, lockKey(k))
		}
		n.inserts += op.plan.inserts
		for _, k := range op.plan.idem {
			n.idemQ, n.idemK = append(n.idemQ, k.queue), append(n.idemK, k.key)
		}
		if c := op.plan.claim; c != nil {
			for _, q := range c.Queues {
				if _, ok := n.limits[q]; !ok {
					n.claimQueues = append(n.claimQueues, q)
				}
				n.limits[q] = min(n.limits[q]+c.Max, db.MaxClaimBatch)
			}
		}
	}
	slices.Sort(n.jobs)
	n.jobs = slices.Compact(n.jobs)
	slices.Sort(n.keys)
	n.keys = slices.Compact(n.keys)
	return n
}

// sendBegin sends a batch's first round trip on tx's connection; readBegin
// reads its answers.
func (s *Store) sendBegin(ctx context.Context, tx *batchTx, need batchNeed) pgx.BatchResults {
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	// The time, kept for the statements after this one in the round trip.
	b.Queue(`SELECT set_config('fenceq.now', (`+nowSQL+`)::text, true)::bigint`, s.clockArg())
	if len(need.keys) > 0 {
		b.Queue(`SELECT count(*) FROM (SELECT DISTINCT k FROM unnest($1::bigint[]) AS u(k) ORDER BY k) AS u
			CROSS JOIN LATERAL pg_advisory_xact_lock(u.k)`, need.keys)
	}
	if len(need.jobs) > 0 {
		b.Queue(`SELECT `+jobColumns+` FROM fenceq_jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE`, need.jobs)
	}
	if need.newIDs() {
		// One per enqueue without a key, and one per key no job holds.
		b.Queue(`SELECT nextval('fenceq_job_id') FROM generate_series(1, $1::int + (SELECT count(*)::int FROM (SELECT DISTINCT q, k FROM unnest($2::text[], $3::bytea[]) AS u(q, k)) AS u
			WHERE NOT EXISTS (SELECT 1 FROM fenceq_jobs WHERE queue = u.q AND idempotency_key = u.k)))`, need.inserts, need.idemQ, toBytes(need.idemK))
	}
	if len(need.idemQ) > 0 {
		b.Queue(`SELECT `+jobColumns+` FROM fenceq_jobs WHERE (queue, idempotency_key) IN (SELECT q, k FROM unnest($1::text[], $2::bytea[]) AS u(q, k))`,
			need.idemQ, toBytes(need.idemK))
	}
	if len(need.claimQueues) > 0 {
		b.Queue(promoteSQL, promoteArgs(db.PlanPromotion(need.claimQueues, time.Time{}, true), nil, nil)...)
		b.Queue(candidatesSQL, candidateArgs(need.claimQueues, need.limits, nil, need.jobs)...)
	}
	// The audit head, if no other replica's batch holds it, last, after
	// every other lock the batch may wait for: the batch then keeps it to
	// its commit, one round trip later, and waits for nothing more
	// (finishBatch). The paused queues are read after it: no pause can
	// commit while the batch holds the head, so its claims decide against
	// every pause committed before.
	b.Queue(headSQL + ` SKIP LOCKED`)
	b.Queue(`SELECT queue FROM fenceq_paused`)
	tx.tripOf(b.Len())
	return tx.conn.SendBatch(ctx, b)
}

func (n batchNeed) newIDs() bool { return n.inserts > 0 || len(n.idemQ) > 0 }

// readBegin reads the answers of sendBegin's round trip into a new view of
// the batch: its time and its rows.
func readBegin(br pgx.BatchResults, tx *batchTx, need batchNeed) (time.Time, *batchView, error) {
	v := newBatchView()
	var ns int64
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&ns)
	}
	if err == nil && len(need.keys) > 0 {
		_, err = br.Exec()
	}
	if err == nil && len(need.jobs) > 0 {
		var recs []*db.JobRecord
		if recs, err = scanJobs(br.Query()); err == nil {
			for _, id := range need.jobs {
				v.asked[uint64(id)] = true
			}
			for _, r := range recs {
				v.rows[r.ID] = r
			}
		}
	}
	if err == nil && need.newIDs() {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			v.ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			slices.Sort(v.ids)
		}
	}
	if err == nil && len(need.idemQ) > 0 {
		for i := range need.idemQ {
			v.idem[idemPair{need.idemQ[i], need.idemK[i]}] = nil // no job holds it
		}
		var recs []*db.JobRecord
		if recs, err = scanJobs(br.Query()); err == nil {
			for _, r := range recs {
				v.idem[idemPair{r.Queue, r.IdempotencyKey}] = r
			}
		}
	}
	if err == nil && len(need.claimQueues) > 0 {
		if err = readPromoted(v, br); err == nil {
			var recs []*db.JobRecord
			if recs, err = scanJobs(br.Query()); err == nil {
				v.fill(need.claimQueues, recs, need.limits)
			}
		}
	}
	if err == nil {
		if tx.head, err = readHeadAndPaused(br, v); tx.head != nil {
			tx.locked = time.Now()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	v.undo = nil
	return time.Unix(0, ns).UTC(), v, nil
}

// readHeadAndPaused reads the audit head (nil: another replica's batch
// holds it, for a SKIP LOCKED read) and the paused queues, into v.
func readHeadAndPaused(br pgx.BatchResults, v *batchView) (*headRow, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	heads, err := pgx.CollectRows(rows, scanHead)
	if err != nil {
		return nil, err
	}
	if rows, err = br.Query(); err != nil {
		return nil, err
	}
	paused, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, q := range paused {
		v.paused[q] = true
	}
	if len(heads) != 1 {
		return nil, nil
	}
	return &heads[0], nil
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// endBatch ends tx (a rollback unless it committed) and gives its
// connection back.
func (s *Store) endBatch(tx *batchTx) {
	if tx.conn == nil {
		return
	}
	if tx.conn.Conn().PgConn().TxStatus() != 'I' {
		// Bounded, and cut by Close: a connection left in a transaction
		// is closed by the pool, which rolls the transaction back.
		ctx, cancel := context.WithTimeout(s.stopped, 5*time.Second)
		_, _ = tx.conn.Exec(ctx, `ROLLBACK`)
		cancel()
	}
	tx.conn.Release()
	tx.conn = nil
}

// headSQL reads the audit head and locks it, with the schema version and
// the minimum writer version: a replica that a newer build's migration
// left behind commits nothing more (schema.go).
const headSQL = `SELECT seq, hash, last_time, ` + schemaVersionSQL + `, min_writer FROM fenceq_audit_head WHERE id = 1 FOR UPDATE`

// headRow is what headSQL reads.
type headRow struct {
	head      auditHead
	version   int64
	minWriter string
}

func scanHead(row pgx.CollectableRow) (headRow, error) {
	var h headRow
	var seq int64
	err := row.Scan(&seq, &h.head.hash, &h.head.lastTime, &h.version, &h.minWriter)
	h.head.seq = uint64(seq)
	return h, err
}

// errNoHead: the audit head's row, which every migrated schema has, is gone.
var errNoHead = errors.New("db: postgres: the audit head row is missing")

// finishBatch writes the batch's job rows (one statement per kind, over
// arrays), moves the counters, appends the batch's links after the audit
// head, sends the notifications and commits. A batch that took the head
// at its start (beginBatch: no other replica's batch held it) does all of
// it in one round trip. One that did not writes its job rows and locks
// the head in a first round trip, and writes the rest in a second: the
// head is then held for one round trip, not two, where replicas contend
// for it. Either way a batch writes nothing after the head's lock but
// what it holds already (its job rows) or what only the head's holder
// writes (counters, links), so that a batch holding the head waits for
// nobody. committed says whether COMMIT was sent and may have been applied
// (an error then leaves the outcome unknown).
func (s *Store) finishBatch(w *writer) (committed bool, err error) {
	tx := w.tx.(*batchTx)
	if tx.early {
		return s.finishEarly(w)
	}
	if tx.head != nil {
		defer s.countHold(tx)
	}
	if len(w.events) == 0 && !hasCounts(w.counts) && len(w.notify) == 0 && len(w.v.dirty) == 0 {
		tx.trip()
		_, err := tx.conn.Exec(w.ctx, `COMMIT`)
		return true, err
	}
	b := &pgx.Batch{}
	updates, inserts, err := w.v.flushJobs(b)
	if err != nil {
		return false, err
	}
	nJobs := b.Len()
	if tx.head == nil {
		b.Queue(headSQL)
		claimed := slices.DeleteFunc(slices.Clone(w.claimed), func(q string) bool { return slices.Contains(w.paused, q) })
		if len(claimed) > 0 {
			// A claim that looked before another replica's pause committed
			// must not commit after it: the pause's commit came before ours
			// took the head, so this statement sees it.
			b.Queue(`SELECT EXISTS (SELECT 1 FROM fenceq_paused WHERE queue = ANY($1))`, claimed)
		}
		tx.tripOf(b.Len())
		br := tx.conn.SendBatch(w.ctx, b)
		err = execWritten(br, nJobs, updates, inserts)
		var heads []headRow
		if err == nil {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				heads, err = pgx.CollectRows(rows, scanHead)
			}
			if err == nil && len(heads) != 1 {
				err = errNoHead
			}
		}
		paused := false
		if err == nil && len(claimed) > 0 {
			err = br.QueryRow().Scan(&paused)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, err
		}
		tx.head, tx.locked = &heads[0], time.Now()
		defer s.countHold(tx)
		if paused {
			return false, errPausedMeanwhile
		}
		b, nJobs, updates, inserts = &pgx.Batch{}, 0, 0, 0
	}
	if err := s.gate.saw(tx.head.version, tx.head.minWriter); err != nil {
		return false, err
	}
	s.queueCounts(b, w)
	if err := s.queueChain(b, w, tx.head.head); err != nil {
		return false, err
	}
	b.Queue(`COMMIT`)
	tx.tripOf(b.Len())
	br := tx.conn.SendBatch(w.ctx, b)
	err = execWritten(br, nJobs, updates, inserts)
	return readCommit(tx, br, nJobs, b.Len(), err)
}

// readCommit reads the answers of a batch's last round trip from its i-th
// statement of n (COMMIT last) and says whether COMMIT may have been
// applied.
func readCommit(tx *batchTx, br pgx.BatchResults, i, n int, err error) (committed bool, _ error) {
	for ; i < n && err == nil; i++ {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pe *pgconn.PgError
	if err != nil && errors.As(err, &pe) && tx.conn.Conn().PgConn().TxStatus() != 'I' {
		// A statement the server refused: it skipped the rest, COMMIT too.
		return false, err
	}
	return true, err
}

// countHold adds how long tx held the audit head to the replica's figures.
func (s *Store) countHold(tx *batchTx) {
	s.headHeld.Add(int64(time.Since(tx.locked)))
	s.headBatches.Add(1)
}

// execWritten reads the results of flushJobs' n statements (the updates
// first, then the inserts) and checks that each wrote every row it was
// given.
func execWritten(br pgx.BatchResults, n, updates, inserts int) error {
	for i := 0; i < n; i++ {
		tag, err := br.Exec()
		switch {
		case err != nil:
			return err
		case i == 0 && updates > 0:
			err = checkWritten("update", tag.RowsAffected(), updates)
		case i == min(updates, 1) && inserts > 0:
			err = checkWritten("insert", tag.RowsAffected(), inserts)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func hasCounts(counts map[countKey]int64) bool {
	for _, d := range counts {
		if d != 0 {
			return true
		}
	}
	return false
}

type auditHead struct {
	seq      uint64
	hash     []byte
	lastTime int64
}

// queueCounts queues on b the batch's changes to the job counters and the
// audit counters, each in this replica's shard, in one order (job counts,
// then audit counts, each by key). A batch writes them while it holds the
// audit head, so two replicas that share a shard never wait for each other
// there.
func (s *Store) queueCounts(b *pgx.Batch, w *writer) {
	if len(w.counts) > 0 {
		keys := make([]countKey, 0, len(w.counts))
		for k, d := range w.counts {
			if d != 0 {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].queue != keys[j].queue {
				return keys[i].queue < keys[j].queue
			}
			return keys[i].state < keys[j].state
		})
		queues, states, ds := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
		for i, k := range keys {
			queues[i], states[i], ds[i] = k.queue, string(k.state), w.counts[k]
		}
		if len(keys) > 0 {
			b.Queue(`INSERT INTO fenceq_job_counts (queue, state, shard, n) SELECT q, st, $4, d FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(q, st, d)
				ON CONFLICT (queue, state, shard) DO UPDATE SET n = fenceq_job_counts.n + excluded.n`, queues, states, ds, s.shard)
		}
	}
	if len(w.events) > 0 {
		counts := map[string]int64{}
		for _, e := range w.events {
			l := db.NextAuditLink(0, nil, w.now, e) // the keys depend on the event alone
			for _, k := range db.AuditCountKeys(&l) {
				counts[k]++
			}
		}
		keys := slices.Sorted(maps.Keys(counts))
		ns := make([]int64, len(keys))
		for i, k := range keys {
			ns[i] = counts[k]
		}
		b.Queue(`INSERT INTO fenceq_audit_counts (key, shard, n) SELECT k, $3, d FROM unnest($1::text[], $2::bigint[]) AS u(k, d)
			ON CONFLICT (key, shard) DO UPDATE SET n = fenceq_audit_counts.n + excluded.n`, keys, ns, s.shard)
	}
}

// queueChain queues on b the audit links of w's events after head and the
// notifications.
func (s *Store) queueChain(b *pgx.Batch, w *writer, head auditHead) error {
	if len(w.events) > 0 {
		seqs := make([]int64, 0, len(w.events))
		subjects := make([]string, 0, len(w.events))
		links := make([][]byte, 0, len(w.events))
		seq, prev := head.seq, head.hash
		// A batch's time may be older than the newest link's, written by
		// another replica's batch that started later and committed first:
		// the chain's times never step back.
		at := w.now
		if head.lastTime > at.UnixNano() {
			at = time.Unix(0, head.lastTime).UTC()
		}
		for _, e := range w.events {
			l := db.NextAuditLink(seq, prev, at, e)
			v, err := l.Seal()
			if err != nil {
				return err
			}
			seqs, subjects, links = append(seqs, int64(l.Seq)), append(subjects, l.Subject), append(links, v)
			seq, prev = l.Seq, l.Hash
		}
		b.Queue(`INSERT INTO fenceq_audit (seq, subject, link) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[])`, seqs, subjects, links)
		b.Queue(`UPDATE fenceq_audit_head SET seq = $1, hash = $2, last_time = $3 WHERE id = 1`, int64(seq), prev, at.UnixNano())
	}
	if len(w.notify) > 0 {
		b.Queue(`SELECT pg_notify($2, p) FROM unnest($1::text[]) AS p`, notifyPayloads(earliestLater(w.notify)), s.channel)
	}
	return nil
}

// earliestLater keeps, of the notes "l <ns> <queue>" (a job of queue
// becomes claimable at ns), the earliest per queue, and none for a queue
// that has a job available now (its waiters look again, and read the next
// due time then); other notes pass (notifyPayloads turns them into
// payloads).
func earliestLater(notes []string) []string {
	type later struct {
		ns  int64
		msg string
	}
	avail := map[string]bool{}
	first := map[string]later{}
	out := make([]string, 0, len(notes))
	for _, n := range notes {
		kind, rest, _ := strings.Cut(n, " ")
		if kind != "l" {
			if kind == "a" || kind == "1" {
				avail[rest] = true
			}
			out = append(out, n)
			continue
		}
		nsText, q, _ := strings.Cut(rest, " ")
		ns, err := strconv.ParseInt(nsText, 10, 64)
		if err != nil {
			out = append(out, n)
			continue
		}
		if f, ok := first[q]; !ok || ns < f.ns {
			first[q] = later{ns, n}
		}
	}
	for q, f := range first {
		if !avail[q] {
			out = append(out, f.msg)
		}
	}
	return out
}
