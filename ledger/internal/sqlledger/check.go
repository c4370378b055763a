package sqlledger

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// CheckIntakeLog verifies the intake log's invariants (see the top of
// intakelog.go), between transactions: nothing is left staged; every dirty
// entry's image in the log row it names is the entry; every clean entry is
// its table row (or its absence); the dirty and shadow counts and both
// ordered sets of work match the cache; the queue is the log table's rows.
// For tests (the stress test of package ledger/sqlite); nil when the cache is
// not current (another process wrote, or the connection changed: the next
// transaction drops it).
func (l *Backend) CheckIntakeLog(ctx context.Context) error {
	e, ok := l.eng.(*logEngine)
	if !ok {
		return fmt.Errorf("intake log: the %s ledger runs without one", l.d.Name)
	}
	g := e.log
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.staged) != 0 {
		return fmt.Errorf("intake log: %d rows left staged between transactions", len(g.staged))
	}
	if !g.valid {
		return nil
	}
	dirty, shadow := 0, 0
	nwork := 0
	for id, c := range g.cache {
		if c.dirty {
			dirty++
			if isWork(c.table) {
				shadow++
			}
			if c.logID == 0 {
				return fmt.Errorf("intake log: %v is dirty and names no log row", id)
			}
		}
		e, isW := workOf(id, c)
		old, had := g.work[id]
		if isW != had || (isW && old != e) {
			return fmt.Errorf("intake log: %v: work entry %v (%v), want %v (%v)", id, old, had, e, isW)
		}
		if isW {
			nwork++
			if !g.workSet(e.leased).Has(e.workKey) {
				return fmt.Errorf("intake log: %v: its work key is missing from its ordered set", id)
			}
		}
	}
	if dirty != g.dirty || shadow != g.shadow {
		return fmt.Errorf("intake log: counts dirty %d, shadow %d; the cache holds %d and %d", g.dirty, g.shadow, dirty, shadow)
	}
	if len(g.work) != nwork {
		return fmt.Errorf("intake log: %d work entries, want %d", len(g.work), nwork)
	}
	if g.work != nil && g.workDue.Len()+g.workLeased.Len() != nwork {
		return fmt.Errorf("intake log: ordered sets of work hold %d+%d, want %d", g.workDue.Len(), g.workLeased.Len(), nwork)
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var dv int64
	if err := tx.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&dv); err != nil {
		return err
	}
	var dc any
	if err := conn.Raw(func(c any) error { dc = c; return nil }); err != nil {
		return err
	}
	if dc != g.conn || dv != g.dataVersion {
		// Another process wrote, or the pool replaced the connection (whose
		// data_version then means nothing): as beginLog, the next
		// transaction drops the cache.
		return nil
	}
	logRows := map[int64]map[rowID][]any{}
	res, err := tx.QueryContext(ctx, `SELECT id, images FROM cairn_intake_log`)
	if err != nil {
		return err
	}
	for res.Next() {
		var id int64
		var s string
		if err := res.Scan(&id, &s); err != nil {
			res.Close()
			return err
		}
		var imgs [][]any
		if err := json.Unmarshal([]byte(s), &imgs); err != nil {
			res.Close()
			return err
		}
		m := map[rowID][]any{}
		for _, im := range imgs {
			m[rowID{im[0].(string), im[1].(string)}] = im
		}
		logRows[id] = m
	}
	res.Close()
	inQueue := map[int64]bool{}
	for _, b := range g.queue {
		inQueue[b.id] = true
		if logRows[b.id] == nil {
			return fmt.Errorf("intake log: queued log row %d is not in the table", b.id)
		}
	}
	for id := range logRows {
		if !inQueue[id] {
			return fmt.Errorf("intake log: log row %d is not queued", id)
		}
	}
	norm := func(a []any) string {
		out := make([]any, len(a))
		for i, v := range a {
			switch x := v.(type) {
			case int64:
				out[i] = float64(x)
			default:
				out[i] = x
			}
		}
		b, _ := json.Marshal(out)
		return string(b)
	}
	for id, c := range g.cache {
		if c.dirty {
			img, ok := logRows[c.logID][id]
			if !ok {
				return fmt.Errorf("intake log: %v is dirty, and its log row %d has no image of it", id, c.logID)
			}
			if norm(img) != norm(l.args(id.ident, c.rec, c.rev)) {
				return fmt.Errorf("intake log: %v: image %v, cache %v", id, img, l.args(id.ident, c.rec, c.rev))
			}
			continue
		}
		// Clean: the table holds it.
		cur := map[rowID]row{}
		r, err := tx.QueryContext(ctx, `SELECT `+cols+`, rev FROM cairn_ledger WHERE bucket = ? AND ident = ?`, id.bucket, id.ident)
		if err != nil {
			return err
		}
		if err := scanRows(r, cur); err != nil {
			return err
		}
		t, ok := cur[id]
		if c.rec == nil {
			if ok {
				return fmt.Errorf("intake log: %v: clean and absent, but the table has revision %d", id, t.rev)
			}
			continue
		}
		if !ok {
			return fmt.Errorf("intake log: %v: clean at revision %d, but not in the table", id, c.rev)
		}
		if !reflect.DeepEqual(l.args(id.ident, c.rec, c.rev), l.args(id.ident, t.rec, t.rev)) {
			return fmt.Errorf("intake log: %v: clean entry %v, table %v", id, l.args(id.ident, c.rec, c.rev), l.args(id.ident, t.rec, t.rev))
		}
	}
	return nil
}
