package objledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-s3/cairn/objstore"
)

var errCompacted = errors.New("objledger: another process compacted the shard first")

// compactLater starts a background compaction of shard s unless one runs.
func (l *Backend) compactLater(s int) {
	l.mu.Lock()
	if l.compacting[s] || l.ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	l.compacting[s] = true
	l.mu.Unlock()
	l.wg.Go(func() {
		defer func() {
			l.mu.Lock()
			l.compacting[s] = false
			l.mu.Unlock()
		}()
		if err := l.compact(l.ctx, s); err != nil && !errors.Is(err, errCompacted) && l.ctx.Err() == nil {
			l.cfg.Logger.Warn("ledger compaction failed; the next write of the shard retries it", "shard", s, "err", err)
		}
	})
}

// Compact compacts shard s now if its head holds more than CompactAt records
// (tests and tools; writes start compactions by themselves).
func (l *Backend) Compact(ctx context.Context, s int) error {
	err := l.compact(ctx, s)
	if errors.Is(err, errCompacted) {
		return nil
	}
	return err
}

// compact writes a new base holding every live record of shard s, then swaps
// it into the head, removing from the head the records it holds that have not
// changed since. Replaced bases past their grace period are deleted.
func (l *Backend) compact(ctx context.Context, s int) error {
	h0, err := l.view(ctx, s)
	if err != nil {
		return err
	}
	if len(h0.Rows) <= l.cfg.CompactAt {
		return nil
	}
	seg := &segment{Rows: make(map[string]*row, len(h0.Rows))}
	if h0.base != nil {
		seg.Rows = make(map[string]*row, len(h0.base.Rows)+len(h0.Rows))
	}
	h0.each(func(rid string, w *row) { seg.Rows[rid] = w })
	data, err := json.Marshal(seg)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("shards/%s/base-%012d-%s.json", shardName(s), h0.Seq, nonce())
	if _, err := l.s.PutBytes(ctx, key, data, &objstore.PutOptions{If: objstore.IfAbsent(), ContentType: "application/json"}); err != nil {
		l.addUnsure(s, key) // may land later: an unused base, deleted by the next swap
		return err
	}
	l.mu.Lock()
	l.bases[key] = seg
	l.mu.Unlock()
	// Delete the replaced bases past their grace first, and drop from the
	// trash only those gone: an interrupted compaction leaves none orphaned.
	gone := map[string]bool{}
	for _, t := range h0.Trash {
		if l.now()-t.Since <= l.cfg.Grace.Milliseconds() {
			continue
		}
		if err := l.s.Delete(ctx, t.Key, objstore.Condition{}); err == nil || errors.Is(err, objstore.ErrNotFound) {
			gone[t.Key] = true
		}
	}
	unsure := l.takeUnsure(s)
	var unused []string
	_, err = l.update(ctx, s, func(h *head, now int64) error {
		if h.Base != h0.Base {
			return errCompacted
		}
		// Bases of this process's earlier compactions of the shard whose swap
		// was not confirmed: one that the head does not name now never will
		// (a late swap lands only on the ETag it read, and this write moves
		// the head past it); one it names is in the trash once this swap lands.
		unused = unused[:0]
		for _, k := range unsure {
			if k != h.Base && !slices.Contains(trashKeys(h.Trash), k) {
				unused = append(unused, k)
			}
		}
		for rid, w0 := range h0.Rows {
			if w, ok := h.Rows[rid]; ok && w.Change == w0.Change {
				delete(h.Rows, rid)
			}
		}
		var keep []trash
		for _, t := range h.Trash {
			if !gone[t.Key] {
				keep = append(keep, t)
			}
		}
		if h.Base != "" {
			keep = append(keep, trash{Key: h.Base, Since: now})
		}
		h.Trash, h.Base, h.base = keep, key, seg
		return nil
	})
	if err != nil {
		// Not swapped in. Only when the head had moved on (another compaction
		// won) can no write of this swap land any more; after any other
		// failure a write of it may still land later, so the new base stays
		// until the next swap of the shard settles it.
		l.addUnsure(s, unsure...)
		if !errors.Is(err, errCompacted) {
			l.addUnsure(s, key)
			return err
		}
		if cur, verr := l.view(context.WithoutCancel(ctx), s); verr == nil && cur.Base != key && !slices.Contains(trashKeys(cur.Trash), key) {
			_ = l.s.Delete(context.WithoutCancel(ctx), key, objstore.Condition{})
			l.forget(key)
		}
		return err
	}
	for _, k := range unused {
		if err := l.s.Delete(ctx, k, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			l.addUnsure(s, k) // try again next time
			continue
		}
		l.forget(k)
	}
	return nil
}

func (l *Backend) addUnsure(s int, keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if !slices.Contains(l.unsure[s], k) {
			l.unsure[s] = append(l.unsure[s], k)
		}
	}
}

func (l *Backend) takeUnsure(s int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.unsure[s]
	delete(l.unsure, s)
	return out
}
