package sqlledger

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/google/btree"

	"github.com/cairn-s3/cairn/ledger"
)

// # The intake log (SQLite)
//
// On SQLite (Dialect.IntakeLog: the logEngine), Record, Claim and the ends
// of a claim (Complete, Renew, Fail, Release) do not write rows: rewriting
// random rows dirties a leaf page per row in each of the table's three
// B-trees, and a record that is recorded, claimed and completed would be
// written three times. Instead:
//
//   - The process holding the writer keeps the rows it has read or written in
//     memory (the cache) and decides from it, by the same rules as the SQL
//     statements (driver.Decide, claimed, checkClaim, completeRecord…).
//   - A transaction's new row images (every column and the new revision) are
//     appended, as one JSON array, to the table cairn_intake_log, in the same
//     transaction as everything else: a call that returned is on disk. Only
//     the newest image of each row goes in: the calls of a transaction stage
//     their rows, and the images are written once, before it commits (or
//     folds), so a row a Record made and a Claim took in one transaction is
//     logged once.
//   - The images are folded into cairn_ledger later, oldest log rows first,
//     each row only if no newer image of it is in the log, so a key recorded,
//     claimed and completed between folds is written once. A fold upserts
//     each image only over an older revision (rev < image's rev), so folding
//     is idempotent and images may be folded in any order.
//   - Claim reads its candidates from cairn_ledger's work index (skipping
//     rows a dirty entry hides, and reading that many more) and from the dirty
//     entries that are work, which the cache keeps ordered by when a claim may
//     take them (B-trees), and claims the oldest: a claim costs O(n log W)
//     with W dirty entries of work, however large the backlog.
//
// The invariant: a row's current state is its cache entry if the process
// holds one marked dirty, else its cairn_ledger row; every dirty entry's
// newest image is in the log. Every other writing transaction (Replay,
// Purge) first folds the whole log (its statements then see every row as it
// is), and so do reads.
//
// Other processes: SQLite's data_version, read at the start of every writing
// transaction on the connection the cache belongs to, changes exactly when
// another connection committed. Then the cache is dropped, and the log (which
// may hold the other process's images, or a crashed process's) is folded
// from the table itself, in SQL. A process killed with images in the log
// thus loses nothing: whoever writes or reads next folds them.
//
// Bounds (LogLimits): the cache holds about LogLimits.Rows rows, at most
// half of them dirty, and the log at most LogLimits.Bytes of images; past
// either, the next logged transaction first folds the oldest log rows until
// it is back under. Each fold is thus about as large as what was logged
// since the last one, not the whole log.

// LogLimits bound the intake log's memory and size (zero fields: defaults).
type LogLimits struct {
	// Rows is how many rows the cache holds (default 262,144, ~400 bytes
	// each), at most half of them dirty.
	Rows int
	// Bytes bounds the images the log holds (default 256 MiB).
	Bytes int64
}

// maxShadow bounds the dirty entries whose table row is work (the claim's
// table scan reads past them: it asks for n + shadow rows), at most a quarter
// of LogLimits.Rows: past it, Claim folds the oldest images until it is back
// under half of it (see logEngine.claim).
const maxShadow = 256

// intakeLog is the writer-side state of the intake log. mu is held for the
// whole of every transaction in log mode, and the transaction changes the
// cache as it goes: a transaction that does not commit (or whose commit's
// outcome is unknown) drops the whole cache, which is then rebuilt from the
// table and the log.
type intakeLog struct {
	// qmu guards the group-commit queue (group.go): calls, the transactions
	// waiting, and leading, whether one of them leads.
	qmu     sync.Mutex
	calls   []*logCall
	leading bool
	mu      sync.Mutex
	// conn is the driver connection the cache belongs to, and dataVersion its
	// data_version when the cache was last known to be current.
	conn        any
	dataVersion int64
	valid       bool
	cache       map[rowID]cached
	dirty       int // entries of cache marked dirty
	// shadow counts the dirty entries whose row in cairn_ledger is work
	// (pending, failed, claimed): stale rows a claim's table scan may meet.
	shadow int
	// work holds the dirty entries that are themselves work, each with its
	// key in one of two ordered sets: pending and failed entries by
	// NextAttempt (workDue), claimed ones by LeaseUntil (workLeased), which
	// is when a claim may take each.
	work       map[rowID]workEntry
	workDue    *btree.BTreeG[workKey]
	workLeased *btree.BTreeG[workKey]
	// queue is the log's rows (batches of images), oldest first; bytes their
	// size.
	queue    []logBatch
	bytes    int64
	maxRows  int
	maxBytes int64
	// maxShadow: the const, or less for a small cache.
	maxShadow int
	// dropAll: the running transaction changed rows behind the cache (in
	// SQL); it folded first, so dropping every entry at commit loses nothing.
	dropAll bool
	// staged lists the rows the running transaction changed whose newest
	// images are not in the log yet (their entries are dirty, with logID 0):
	// flushLog appends them as one log row before the transaction commits or
	// folds, so a row changed by several calls of a transaction (a Record
	// and the Claim that takes its work) is logged once.
	staged []rowID
	// scratch is flushLog's buffer (a log row is ~320 bytes per image),
	// reused from one transaction to the next (mu is held).
	scratch []byte
}

// maxScratch bounds the buffer intakeLog keeps between transactions.
const maxScratch = 1 << 20

// cached is a row as last read or written, with its revision; dirty: its
// newest image is in the log row logID (0: staged, in the log once the
// transaction flushes it), not yet in cairn_ledger, whose row has the status
// table ("" for none).
type cached struct {
	row
	dirty bool
	table ledger.Status
	logID int64
}

// logBatch is one row of cairn_intake_log: its id, the rows it holds an image
// of (an image is current while the row's entry names this batch), and its
// size.
type logBatch struct {
	id    int64
	ids   []rowID
	bytes int64
}

// workKey orders dirty entries of work: at (ms) is when a claim may take it.
type workKey struct {
	at int64
	id rowID
}

// workEntry is a dirty entry's key and its set (leased: workLeased).
type workEntry struct {
	workKey
	leased bool
}

// lessWork orders workKeys by time, then by row (a total order: each row
// has one key).
func lessWork(a, b workKey) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return compareID(a.id, b.id) < 0
}

// isWork tells the statuses a claim may take (when due).
func isWork(s ledger.Status) bool {
	return s == ledger.Pending || s == ledger.Failed || s == ledger.Claimed
}

// status is a row's status, "" for no row.
func (r row) status() ledger.Status {
	if r.rec == nil {
		return ""
	}
	return r.rec.Status
}

// put sets the cache entry of id, keeping the counts and the ordered sets of
// work.
func (g *intakeLog) put(id rowID, c cached) {
	if g.cache == nil {
		g.cache = map[rowID]cached{}
	}
	if prev, ok := g.cache[id]; ok && prev.dirty {
		g.dirty--
		if isWork(prev.table) {
			g.shadow--
		}
	}
	if c.dirty {
		g.dirty++
		if isWork(c.table) {
			g.shadow++
		}
	}
	g.cache[id] = c
	e, isW := workOf(id, c)
	old, had := g.work[id]
	if had && isW && old == e {
		return // unchanged (a coalesced pending key keeps its place): most Records
	}
	if had {
		delete(g.work, id)
		g.workSet(old.leased).Delete(old.workKey)
	}
	if isW {
		if g.work == nil {
			g.work = map[rowID]workEntry{}
			g.workDue, g.workLeased = btree.NewG(16, lessWork), btree.NewG(16, lessWork)
		}
		g.work[id] = e
		g.workSet(e.leased).ReplaceOrInsert(e.workKey)
	}
}

// workOf is the key of c in the ordered sets, if c is a dirty entry of work.
func workOf(id rowID, c cached) (workEntry, bool) {
	switch st := c.status(); {
	case !c.dirty || !isWork(st):
		return workEntry{}, false
	case st == ledger.Claimed:
		return workEntry{workKey{ms(c.rec.LeaseUntil), id}, true}, true
	default:
		return workEntry{workKey{ms(c.rec.NextAttempt), id}, false}, true
	}
}

// workSet is the ordered set of claimed entries (leased) or of the others.
func (g *intakeLog) workSet(leased bool) *btree.BTreeG[workKey] {
	if leased {
		return g.workLeased
	}
	return g.workDue
}

// reset forgets everything: the table and the log are the truth.
func (g *intakeLog) reset() {
	g.valid, g.cache, g.dirty, g.shadow, g.queue, g.bytes, g.staged = false, nil, 0, 0, nil, 0, nil
	g.work, g.workDue, g.workLeased = nil, nil, nil
}

// opFold is the op of settle's transaction, which only folds.
const opFold = "fold"

// logged tells the ops that run on the cache and may leave the log unfolded:
// Record, Claim and the ends of a claim. Every other op folds first and may
// change rows behind the cache (dropAll).
func logged(op string) bool {
	switch op {
	case opRecord, opClaim, opComplete, opRenew, opFail, opRelease:
		return true
	}
	return false
}

// The intake log's statements (prepared once: Backend.prepared).
const (
	sqlDataVersion = `PRAGMA data_version`
	sqlAppendLog   = `INSERT INTO cairn_intake_log (images) VALUES (?)`
	sqlTrimLog     = `DELETE FROM cairn_intake_log WHERE id <= ?`
)

var logStatements = []string{sqlDataVersion, sqlAppendLog, sqlTrimLog, claimScanSQL}

// LogMigration creates the intake log's table: a migration of the SQLite
// schema (package ledger/sqlite), which also makes cairn versions that do
// not know the log refuse the file.
const LogMigration = `CREATE TABLE cairn_intake_log (id INTEGER PRIMARY KEY, images TEXT NOT NULL)`

// logEngine is the engine of the intake log (see above).
type logEngine struct {
	*Backend
	log *intakeLog
}

// runLogTx runs fn in one transaction of the intake log, for tryTx's leader
// (group.go), which holds the log's mutex: the transaction runs on the
// pool's one connection, whose data_version tells whether the cache is
// current; an op that is not logged first folds the log.
func (l *logEngine) runLogTx(ctx context.Context, op string, fn func(tx *sql.Tx, now time.Time) error) (err error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return l.wrap(op, err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return l.wrap(op, err)
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback()
		}
		l.endLog(committed)
	}()
	if err := l.beginLog(ctx, conn, tx, op); err != nil {
		return abandoned(ctx, tx, l.wrap(op, err))
	}
	now, err := l.now(ctx, tx)
	if err != nil {
		return abandoned(ctx, tx, l.wrap(op, err))
	}
	ferr := fn(tx, now)
	if ferr != nil && !refused(ferr) {
		return abandoned(ctx, tx, ferr)
	}
	if err := l.flushLog(ctx, tx); err != nil {
		return abandoned(ctx, tx, l.wrap(op, err))
	}
	// A refusal (lease lost, superseded, not found) is decided before its
	// call writes anything: what the transaction did before it (a fold)
	// commits, and the cache stays.
	if err := commit(ctx, tx); err != nil {
		return l.wrap(op, err)
	}
	committed = true
	return ferr
}

// settle folds the intake log before a read, so that reads see every
// recorded event: the dirty rows this process holds, and images another
// process (or a crashed one) left in the log.
func (l *logEngine) settle(ctx context.Context) error {
	l.log.mu.Lock()
	clean := l.log.valid && l.log.dirty == 0
	l.log.mu.Unlock()
	if clean {
		var any bool
		if err := l.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM cairn_intake_log)`).Scan(&any); err != nil {
			return err
		}
		if !any {
			return nil
		}
	}
	return l.inTx(ctx, opFold, func(*sql.Tx, time.Time) error { return nil })
}

// close leaves the log folded, so that the next process to open the file
// does not fold it all in SQL. Best effort: whoever writes or reads next
// folds what is left.
func (l *logEngine) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeFoldTimeout)
	_ = l.settle(ctx)
	cancel()
	// A closed handle may stay reachable (a deferred Close while the file is
	// opened again): it keeps none of its cache.
	l.log.mu.Lock()
	l.log.reset()
	l.log.mu.Unlock()
}

// closeFoldTimeout bounds the fold at Close.
const closeFoldTimeout = 30 * time.Second

// load answers from the cache where it can; the rows it reads from the
// table (or finds missing) enter the cache.
func (l *logEngine) load(ctx context.Context, tx *sql.Tx, ids []rowID) (map[rowID]row, error) {
	var miss []rowID
	hits := make(map[rowID]row, len(ids))
	for _, id := range ids {
		if c, ok := l.log.cache[id]; ok {
			if c.rec != nil {
				hits[id] = c.row
			}
		} else {
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return hits, nil
	}
	cur, err := l.loadTable(ctx, tx, miss)
	if err != nil {
		return nil, err
	}
	for _, id := range miss {
		l.log.put(id, cached{row: cur[id]})
	}
	for id, r := range hits {
		cur[id] = r
	}
	return cur, nil
}

// write stages the rows for the log (every row is written: the
// transaction is exclusive); rows the log cannot carry are written into
// cairn_ledger with upsert.
func (l *logEngine) write(ctx context.Context, tx *sql.Tx, changed map[rowID]*row) (map[rowID]bool, error) {
	if len(changed) == 0 {
		return map[rowID]bool{}, nil
	}
	if !l.stageLog(changed) {
		// The rows' guard compares with the table's revision: fold first.
		if err := l.foldAll(ctx, tx); err != nil {
			return nil, err
		}
		if _, err := l.upsert(ctx, tx, l.images(changed)); err != nil {
			return nil, err
		}
		for id, r := range changed {
			l.log.put(id, cached{row: *r})
		}
	}
	written := make(map[rowID]bool, len(changed))
	for id := range changed {
		written[id] = true
	}
	return written, nil
}

// claimsAsRecorded is false: a Record stages its rows, and the Claim after
// it, in the same transaction, stages those it takes again: each row is
// logged once either way (flushLog).
func (l *logEngine) claimsAsRecorded(context.Context, *sql.Tx, time.Time) (bool, error) {
	return false, nil
}

// beginLog checks, at the start of a transaction on conn, that the cache is
// still current, and otherwise drops it and folds the log from the table.
// Then it folds: everything for an op that is not logged, else the oldest
// images while the log is past its bounds.
func (l *logEngine) beginLog(ctx context.Context, conn *sql.Conn, tx *sql.Tx, op string) error {
	g := l.log
	g.dropAll = !logged(op) && op != opFold
	var dc any
	if err := conn.Raw(func(c any) error { dc = c; return nil }); err != nil {
		return err
	}
	var dv int64
	res, err := l.query(ctx, tx, sqlDataVersion)
	if err != nil {
		return err
	}
	if !res.Next() {
		res.Close()
		return fmt.Errorf("no data_version: %w", cmp.Or(res.Err(), sql.ErrNoRows))
	}
	err = res.Scan(&dv)
	res.Close()
	if err != nil {
		return err
	}
	if !g.valid || dc != g.conn || dv != g.dataVersion {
		// Another process (or connection) wrote, or this process's state is
		// unknown: fold whatever the log holds, from the table.
		g.reset()
		// A newer cairn may have upgraded the schema since this process
		// opened the ledger: its log images then have another shape, which
		// this process's fold would store in the wrong columns. Refuse.
		var v int
		if err := tx.QueryRowContext(ctx, `SELECT version FROM cairn_schema`).Scan(&v); err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if v > len(l.d.Migrations) {
			return fmt.Errorf("the ledger was upgraded to schema version %d by a newer cairn while this one (version %d) had it open: "+
				"nothing was written; stop this process and run the newer cairn", v, len(l.d.Migrations))
		}
		g.conn, g.dataVersion = dc, dv
		if err := l.foldTable(ctx, tx); err != nil {
			return fmt.Errorf("folding the intake log: %w", err)
		}
	}
	if !logged(op) {
		err = l.foldAll(ctx, tx)
	} else {
		err = l.foldWhile(ctx, tx, func() bool { return g.dirty > g.maxRows/2 || g.bytes > g.maxBytes })
	}
	if err != nil {
		return fmt.Errorf("folding the intake log: %w", err)
	}
	return nil
}

// endLog ends a transaction (committed false: it did not commit, or its
// outcome is unknown).
func (l *logEngine) endLog(committed bool) {
	g := l.log
	defer func() { g.dropAll = false }()
	if !committed || g.dropAll && g.dirty > 0 {
		// Unknown (or, against the rule that such ops fold first, dirty
		// entries under rows changed in SQL): start over from the table and
		// the log.
		g.reset()
		return
	}
	if len(g.staged) > 0 {
		// Committed without its staged images (runLogTx flushes them): the
		// log does not hold what the cache says it does.
		g.reset()
		return
	}
	g.valid = true
	switch {
	case g.dropAll:
		clear(g.cache)
	case len(g.cache) > g.maxRows:
		// Full: drop the clean entries (the dirty ones are the only copy
		// outside the log; beginLog folds before they alone fill the cache).
		for id, c := range g.cache {
			if !c.dirty {
				delete(g.cache, id)
			}
		}
	}
}

// foldTable folds every image in the log into cairn_ledger, oldest first,
// each over an older revision only, and empties the log: in SQL, so it also
// folds images this process never saw.
func (l *logEngine) foldTable(ctx context.Context, tx *sql.Tx) error {
	var any bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM cairn_intake_log)`).Scan(&any); err != nil || !any {
		return err
	}
	// One log row at a time: a statement over the whole log (up to
	// LogLimits.Bytes of JSON) would hold all its images in memory at once.
	res, err := tx.QueryContext(ctx, `SELECT id FROM cairn_intake_log ORDER BY id`)
	if err != nil {
		return err
	}
	var ids []int64
	for res.Next() {
		var id int64
		if err := res.Scan(&id); err != nil {
			res.Close()
			return err
		}
		ids = append(ids, id)
	}
	res.Close()
	if err := res.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, foldLogSQL, id); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM cairn_intake_log`)
	return err
}

// foldLogSQL upserts every image of one log row over an older revision only (so
// where the log holds several images of a row, the newest wins whatever the
// order).
var foldLogSQL = func() string {
	sel := "SELECT "
	for i := range colTypes {
		if i > 0 {
			sel += ", "
		}
		sel += "j.value->>" + strconv.Itoa(i)
	}
	sel += " FROM cairn_intake_log g, jsonb_each(jsonb(g.images)) j WHERE g.id = ?"
	return `INSERT INTO cairn_ledger (` + cols + `, rev) ` + sel + foldConflict
}()

// foldConflict is the upsert clause of a fold: an image replaces a row only
// if it is newer.
const foldConflict = onConflictSet + `
WHERE cairn_ledger.rev < excluded.rev`

// foldAll writes every dirty entry into cairn_ledger and empties the log.
func (l *logEngine) foldAll(ctx context.Context, tx *sql.Tx) error {
	return l.foldWhile(ctx, tx, func() bool { return true })
}

// foldWhile folds the log's oldest batches while more is true: it writes
// the entries whose newest image they hold into cairn_ledger (in key order,
// over older revisions only), deletes those log rows and marks the entries
// clean. Entries with a newer image stay dirty: the batches that hold it stay.
func (l *logEngine) foldWhile(ctx context.Context, tx *sql.Tx, more func() bool) error {
	g := l.log
	if err := l.flushLog(ctx, tx); err != nil {
		return err
	}
	n, cut := 0, int64(0)
	var ids []rowID
	for ; n < len(g.queue) && more(); n++ {
		b := g.queue[n]
		for _, id := range b.ids {
			if c := g.cache[id]; c.dirty && c.logID == b.id {
				ids = append(ids, id)
				g.put(id, cached{row: c.row, table: c.status()}) // for more(): undone below if the fold fails
			}
		}
		cut = b.id
		g.bytes -= b.bytes
	}
	if n == 0 {
		return nil
	}
	slices.SortFunc(ids, compareID)
	batch := make([][]any, len(ids))
	for i, id := range ids {
		c := g.cache[id]
		batch[i] = l.args(id.ident, c.rec, c.rev)
	}
	if err := l.execChunks(ctx, tx, l.folds, batch, false); err != nil {
		g.reset() // the entries above were marked clean: the cache is not current
		return err
	}
	if _, err := l.exec(ctx, tx, sqlTrimLog, cut); err != nil {
		g.reset()
		return err
	}
	g.queue = g.queue[n:]
	return nil
}

// stageLog makes the rows of changed their dirty cache entries, to be
// logged when the transaction flushes (flushLog). ok is false, with nothing
// staged, if a row holds a string that is not valid UTF-8 (JSON cannot carry
// it exactly): the caller writes those rows directly.
func (l *logEngine) stageLog(changed map[rowID]*row) (ok bool) {
	for id, r := range changed {
		if !l.validImage(id.ident, r) {
			return false
		}
	}
	g := l.log
	for id, r := range changed {
		c := cached{row: *r, dirty: true}
		switch old, ok := g.cache[id]; {
		case ok && old.dirty:
			c.table = old.table
			if old.logID == 0 {
				g.put(id, c) // staged already
				continue
			}
		case ok:
			c.table = old.status()
		default:
			// Not read through the cache: assume the table's row is work.
			c.table = ledger.Claimed
		}
		g.put(id, c)
		g.staged = append(g.staged, id)
	}
	return true
}

// flushLog appends the staged rows' images (in key order) to the log as one
// row, and names it in their cache entries.
func (l *logEngine) flushLog(ctx context.Context, tx *sql.Tx) error {
	g := l.log
	if len(g.staged) == 0 {
		return nil
	}
	ids := g.staged
	slices.SortFunc(ids, compareID)
	buf := g.scratch[:0]
	defer func() {
		if cap(buf) <= maxScratch {
			g.scratch = buf
		}
	}()
	buf = append(buf, '[')
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		c := g.cache[id]
		buf, _ = l.appendImage(buf, id.ident, &c.row) // valid: stageLog checked
	}
	buf = append(buf, ']')
	// The driver copies a bound string into SQLite's memory before Exec
	// returns, and buf is not written again until then: no copy is needed.
	res, err := l.exec(ctx, tx, sqlAppendLog, unsafe.String(unsafe.SliceData(buf), len(buf)))
	if err != nil {
		return err
	}
	logID, err := res.LastInsertId()
	if err != nil {
		return err
	}
	for _, id := range ids {
		c := g.cache[id]
		c.logID = logID // dirty and work state unchanged: no put needed
		g.cache[id] = c
	}
	g.staged = nil
	g.queue = append(g.queue, logBatch{id: logID, ids: ids, bytes: int64(len(buf))})
	g.bytes += int64(len(buf))
	return nil
}

// validImage tells whether every string of r's image is valid UTF-8.
func (l *Backend) validImage(ident string, r *row) bool {
	ok := true
	l.columns(ident, r.rec, r.rev, func(s string) { ok = ok && utf8.ValidString(s) }, func(int64) {})
	return ok
}

// appendImage appends r's image, its columns (l.columns) as a JSON array, to
// buf; ok is false if a string is not valid UTF-8.
func (l *Backend) appendImage(buf []byte, ident string, r *row) (_ []byte, ok bool) {
	ok = true
	buf = append(buf, '[')
	sep := func() {
		if buf[len(buf)-1] != '[' {
			buf = append(buf, ',')
		}
	}
	l.columns(ident, r.rec, r.rev, func(s string) {
		sep()
		ok = ok && utf8.ValidString(s)
		buf = appendJSONString(buf, s)
	}, func(v int64) {
		sep()
		buf = strconv.AppendInt(buf, v, 10)
	})
	return append(buf, ']'), ok
}

// appendJSONString appends s (valid UTF-8) as a JSON string.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		default:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// claimScanSQL reads Claim's candidates off the work index, each state's
// oldest first, at most ? of each: cairn_ledger's rows only, some of them
// stale under dirty cache entries (logEngine.claim reads that many more). The
// index holds the key: the first two arms read nothing else.
const claimScanSQL = `SELECT * FROM (SELECT bucket, ident, next_at FROM cairn_ledger WHERE status = 'pending' AND next_at <= ?1 ORDER BY next_at LIMIT ?2)
UNION ALL SELECT * FROM (SELECT bucket, ident, next_at FROM cairn_ledger WHERE status = 'failed' AND next_at <= ?1 ORDER BY next_at LIMIT ?2)
UNION ALL SELECT * FROM (SELECT bucket, ident, next_at FROM cairn_ledger WHERE status = 'claimed' AND lease_until < ?1 LIMIT ?2)`

// claim is Claim with the intake log: the candidates are the due rows
// of cairn_ledger that no dirty entry hides, and the n earliest due dirty
// entries of each ordered set (pending and failed work by NextAttempt; when
// more than n leases ran out, the n that ran out first, as on PostgreSQL);
// the n oldest candidates (by NextAttempt) are claimed by appending their
// images, so a record claimed and completed between folds is written to the
// table once. With EveryVersion (one version of a key at a time, decided in
// SQL) it folds and runs the statement.
func (l *logEngine) claim(ctx context.Context, tx *sql.Tx, now time.Time, n int, lease time.Duration) ([]ledger.Claim, error) {
	g := l.log
	if l.opts.EveryVersion {
		if err := l.foldAll(ctx, tx); err != nil {
			return nil, l.wrap("claim", err)
		}
		cs, err := l.claimTx(ctx, tx, now, n, lease)
		// The statement changed rows behind the cache, whose entries are all
		// clean after the fold: drop them now, before a later call of the same
		// group reads one.
		clear(g.cache)
		return cs, err
	}
	if g.shadow > g.maxShadow {
		err := l.foldWhile(ctx, tx, func() bool { return g.shadow > g.maxShadow/2 })
		if err != nil {
			return nil, l.wrap("claim", err)
		}
	}
	nowMS := ms(now)
	type cand struct {
		id     rowID
		nextAt int64
	}
	var cands []cand
	res, err := l.query(ctx, tx, claimScanSQL, nowMS, n+g.shadow)
	if err != nil {
		return nil, l.wrap("claim", err)
	}
	for res.Next() {
		var c cand
		if err := res.Scan(&c.id.bucket, &c.id.ident, &c.nextAt); err != nil {
			res.Close()
			return nil, l.wrap("claim", err)
		}
		if e, ok := g.cache[c.id]; ok && e.dirty {
			continue // stale: the entry is the row
		}
		cands = append(cands, c)
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, l.wrap("claim", err)
	}
	// The dirty entries due, at most n of each set: only n are claimed.
	take := func(set *btree.BTreeG[workKey], last int64) {
		k := 0
		set.Ascend(func(w workKey) bool {
			if w.at > last || k == n {
				return false
			}
			if e := g.cache[w.id]; due(e.rec, nowMS) {
				cands = append(cands, cand{w.id, ms(e.rec.NextAttempt)})
				k++
			}
			return true
		})
	}
	if g.work != nil {
		take(g.workDue, nowMS)      // pending, failed: NextAttempt <= now
		take(g.workLeased, nowMS-1) // claimed: LeaseUntil < now
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(a.nextAt, b.nextAt), compareID(a.id, b.id)) })
	ids := make([]rowID, min(n, len(cands)))
	for i := range ids {
		ids[i] = cands[i].id
	}
	cur, err := l.load(ctx, tx, ids)
	if err != nil {
		return nil, l.wrap("claim", err)
	}
	next := make(map[rowID]*row, len(ids))
	out := make([]ledger.Claim, 0, len(ids))
	for _, id := range ids {
		r, ok := cur[id]
		if !ok || !due(r.rec, nowMS) {
			return nil, l.wrap("claim", fmt.Errorf("candidate %s/%s is not due work (%v): the cache is not current", id.bucket, id.ident, r.status()))
		}
		c := claimed(r.rec, now, lease)
		next[id] = &row{&c, r.rev + 1}
		out = append(out, ledger.Claim{Record: c, Ident: id.ident})
	}
	if _, err := l.write(ctx, tx, next); err != nil {
		return nil, l.wrap("claim", err)
	}
	return out, nil
}

// due tells whether r is work a claim may take at nowMS (Claim's rule).
func due(r *ledger.Record, nowMS int64) bool {
	switch r.Status {
	case ledger.Pending, ledger.Failed:
		return ms(r.NextAttempt) <= nowMS
	case ledger.Claimed:
		return ms(r.LeaseUntil) < nowMS
	}
	return false
}

// changeClaim is one guarded change of a claim's row (Complete, Renew, Fail,
// Release) with the intake log: the row is read through the cache, checked
// as finishSQL's guard checks it (checkClaim), changed by ch.apply and
// appended as an image.
func (l *logEngine) changeClaim(ctx context.Context, tx *sql.Tx, now time.Time, op string, c ledger.Claim, ch claimChange) error {
	id := rowID{c.Bucket, c.Ident}
	cur, err := l.load(ctx, tx, []rowID{id})
	if err != nil {
		return l.wrap(op, err)
	}
	r := cur[id]
	if err := checkClaim(op, c, r.rec, now); err != nil {
		return err
	}
	n := *r.rec
	ch.apply(&n, now)
	n.Updated = now
	next := map[rowID]*row{id: {&n, r.rev + 1}}
	if _, err := l.write(ctx, tx, next); err != nil {
		return l.wrap(op, err)
	}
	return nil
}

// completeBatch is CompleteBatch with the intake log: each claim is checked
// and completed in Go (changeClaim's rules, in key order, so a claim listed
// twice is refused the second time) and the images appended in one row.
func (l *logEngine) completeBatch(ctx context.Context, tx *sql.Tx, now time.Time, cs []ledger.Claim, results []string, order []int) ([]error, error) {
	ids := make([]rowID, 0, len(cs))
	for _, i := range order {
		ids = append(ids, rowID{cs[i].Bucket, cs[i].Ident})
	}
	cur, err := l.load(ctx, tx, slices.Compact(ids))
	if err != nil {
		return nil, l.wrap("complete", err)
	}
	errs := make([]error, len(cs))
	next := map[rowID]*row{}
	for _, i := range order {
		c := cs[i]
		id := rowID{c.Bucket, c.Ident}
		r, ok := next[id]
		if !ok {
			x := cur[id]
			r = &x
		}
		if errs[i] = checkClaim(opComplete, c, r.rec, now); errs[i] != nil {
			continue
		}
		n := *r.rec
		completeRecord(&n, results[i], now)
		n.Updated = now
		next[id] = &row{&n, r.rev + 1}
	}
	if _, err := l.write(ctx, tx, next); err != nil {
		return nil, l.wrap("complete", err)
	}
	return errs, nil
}
