package sqlledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// # The intake log (SQLite)
//
// On SQLite a Record batch does not write its rows. Rewriting ~1,000 random
// rows dirties a leaf page per row in each of the table's three B-trees, so a
// batch committed ~12 MB of pages and ~12 µs of VDBE work per row, which
// capped decisions near 30k/s. Instead (Dialect.IntakeLog):
//
//   - The process holding the writer keeps the rows it has read or decided in
//     memory (the cache) and decides a batch from it.
//   - A batch's new row images (every column and the new revision) are
//     appended, as one JSON array, to the table cairn_intake_log, in the same
//     transaction as everything else: a Record that returned is on disk.
//   - The images are folded into cairn_ledger later, many batches at once, so a
//     key written ten times between folds is written once. A fold upserts each
//     image only over an older revision (rev < image's rev), so folding is
//     idempotent and images may be folded in any order.
//
// The invariant: a row's current state is its cache entry if the process
// holds one marked dirty, else its cairn_ledger row; every dirty entry's
// image is also in the log. Every other writing transaction (Claim,
// Complete, Renew, Fail, Release, Replay, Purge) first folds the dirty entries
// (its statements then see every row as it is), and reads fold before they
// read, so only Record ever sees unfolded state.
//
// Other processes: SQLite's data_version, read at the start of every writing
// transaction on the connection the cache belongs to, changes exactly when
// another connection committed. Then the cache is dropped, and the log (which
// may hold the other process's images, or a crashed process's) is folded
// from the table itself, in SQL. A process killed with images in the log
// thus loses nothing: whoever writes or reads next folds them.
//
// Bounds (LogLimits): the cache holds about LogLimits.Rows rows, at most
// half of them dirty, and the log at most LogLimits.Bytes of images between
// folds; past either, the next Record folds first.

// LogLimits bound the intake log's memory and size (zero fields: defaults).
type LogLimits struct {
	// Rows is how many rows the cache holds (default 262,144, ~400 bytes
	// each), at most half of them dirty.
	Rows int
	// Bytes bounds the images appended between folds (default 256 MiB).
	Bytes int64
}

// intakeLog is the writer-side state of the intake log. mu is held for the
// whole of every transaction in log mode, so the fields change only between
// transactions.
type intakeLog struct {
	mu sync.Mutex
	// conn is the driver connection the cache belongs to, and dataVersion its
	// data_version when the cache was last known to be current.
	conn        any
	dataVersion int64
	valid       bool
	cache       map[rowID]cached
	dirty       int   // entries of cache marked dirty
	bytes       int64 // bytes of images appended since the last fold
	maxRows     int
	maxBytes    int64
	// staged are the changes of the running transaction, applied to the cache
	// only when it commits.
	staged  map[rowID]cached
	folded  bool // the running transaction folded every dirty entry
	dropAll bool // the running transaction may change rows behind the cache
	addB    int64
}

// cached is a row as last read or written, with its revision; dirty: its
// image is in the log, not yet in cairn_ledger.
type cached struct {
	row
	dirty bool
}

// opFold is the op of settle's transaction, which only folds.
const opFold = "fold"

// LogMigration creates the intake log's table: a migration of the SQLite
// schema (package ledger/sqlite), which also makes cairn versions that do
// not know the log refuse the file.
const LogMigration = `CREATE TABLE cairn_intake_log (id INTEGER PRIMARY KEY, images TEXT NOT NULL)`

// beginLog checks, at the start of a transaction on conn, that the cache is
// still current, and otherwise drops it and folds the log from the table.
func (l *Backend) beginLog(ctx context.Context, conn *sql.Conn, tx *sql.Tx, op string) error {
	g := l.log
	record := op == opRecord
	// A fold changes no row's state: the cache stays. Every other op may.
	g.staged, g.folded, g.dropAll, g.addB = map[rowID]cached{}, false, !record && op != opFold, 0
	var dc any
	if err := conn.Raw(func(c any) error { dc = c; return nil }); err != nil {
		return err
	}
	var dv int64
	if err := tx.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&dv); err != nil {
		return err
	}
	if !g.valid || dc != g.conn || dv != g.dataVersion {
		// Another process (or connection) wrote, or this process's state is
		// unknown: fold whatever the log holds, from the table.
		g.valid, g.cache, g.dirty, g.bytes = false, nil, 0, 0
		g.conn, g.dataVersion = dc, dv
		if err := l.foldTable(ctx, tx); err != nil {
			return fmt.Errorf("folding the intake log: %w", err)
		}
		g.folded = true
	}
	if !record || g.dirty > 0 && (g.dirty >= g.maxRows/2 || g.bytes >= g.maxBytes) {
		if err := l.foldDirty(ctx, tx); err != nil {
			return fmt.Errorf("folding the intake log: %w", err)
		}
	}
	return nil
}

// endLog applies the transaction's changes to the cache once it committed
// (committed false: it did not, or its outcome is unknown).
func (l *Backend) endLog(committed bool) {
	g := l.log
	defer func() { g.staged, g.folded, g.dropAll, g.addB = nil, false, false, 0 }()
	if !committed {
		// Unknown: start over from the table and the log.
		g.valid, g.cache, g.dirty, g.bytes = false, nil, 0, 0
		return
	}
	g.valid = true
	if g.cache == nil {
		g.cache = map[rowID]cached{}
	}
	if g.folded {
		g.dirty, g.bytes = 0, 0
		for id, c := range g.cache {
			if c.dirty {
				c.dirty = false
				g.cache[id] = c
			}
		}
	}
	switch {
	case g.dropAll:
		// The transaction may have changed rows behind the cache; it folded
		// first, so every entry is clean and dropping them loses nothing.
		clear(g.cache)
		g.dirty = 0
	case len(g.cache)+len(g.staged) > g.maxRows:
		// Full: drop the clean entries (the dirty ones are the only copy
		// outside the log; beginLog folds before they alone fill the cache).
		for id, c := range g.cache {
			if !c.dirty {
				delete(g.cache, id)
			}
		}
	}
	for id, c := range g.staged {
		if old, ok := g.cache[id]; ok && old.dirty {
			g.dirty--
		}
		if c.dirty {
			g.dirty++
		}
		g.cache[id] = c
	}
	g.bytes += g.addB
}

// foldTable folds every image in the log into cairn_ledger, oldest first,
// each over an older revision only, and empties the log: in SQL, so it also
// folds images this process never saw.
func (l *Backend) foldTable(ctx context.Context, tx *sql.Tx) error {
	var any bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM cairn_intake_log)`).Scan(&any); err != nil || !any {
		return err
	}
	if _, err := tx.ExecContext(ctx, foldLogSQL); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM cairn_intake_log`)
	return err
}

// foldLogSQL upserts every image of the log over an older revision only (so
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
	sel += " FROM cairn_intake_log g, jsonb_each(jsonb(g.images)) j WHERE true"
	return `INSERT INTO cairn_ledger (` + cols + `, rev) ` + sel + foldConflict
}()

// foldConflict is the upsert clause of a fold: an image replaces a row only
// if it is newer.
const foldConflict = onConflictSet + `
WHERE cairn_ledger.rev < excluded.rev`

// foldDirty writes the cache's dirty entries into cairn_ledger (in key
// order, over older revisions only) and empties the log.
func (l *Backend) foldDirty(ctx context.Context, tx *sql.Tx) error {
	g := l.log
	if g.dirty == 0 {
		return nil
	}
	ids := make([]rowID, 0, g.dirty)
	for id, c := range g.cache {
		if c.dirty {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareID)
	batch := make([][]any, len(ids))
	for i, id := range ids {
		c := g.cache[id]
		batch[i] = l.args(id.ident, c.rec, c.rev)
	}
	if err := l.execChunks(ctx, tx, l.folds, batch, false); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM cairn_intake_log`); err != nil {
		return err
	}
	g.folded = true
	return nil
}

// appendLog appends the images of batch (l.args rows) to the log, staging
// them as dirty cache entries. ok is false, with nothing written, if an image
// holds a string that is not valid UTF-8 (JSON cannot carry it exactly): the
// caller writes those rows directly.
func (l *Backend) appendLog(ctx context.Context, tx *sql.Tx, batch [][]any, next map[rowID]*row) (ok bool, err error) {
	buf := make([]byte, 0, len(batch)*256)
	buf = append(buf, '[')
	for i, r := range batch {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		for j, v := range r {
			if j > 0 {
				buf = append(buf, ',')
			}
			switch v := v.(type) {
			case string:
				if !utf8.ValidString(v) {
					return false, nil
				}
				buf = appendJSONString(buf, v)
			case int64:
				buf = strconv.AppendInt(buf, v, 10)
			case int:
				buf = strconv.AppendInt(buf, int64(v), 10)
			default:
				return false, fmt.Errorf("intake log: column %d has type %T", j, v)
			}
		}
		buf = append(buf, ']')
	}
	buf = append(buf, ']')
	if _, err := tx.ExecContext(ctx, `INSERT INTO cairn_intake_log (images) VALUES (?)`, string(buf)); err != nil {
		return false, err
	}
	g := l.log
	g.addB += int64(len(buf))
	for id, r := range next {
		g.staged[id] = cached{row: *r, dirty: true}
	}
	return true, nil
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
