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

// Compaction keeps heads small: when a head holds more than CompactAt
// changed records (default 128), a background compaction writes the head's
// records into a new immutable segment, merged with the newest segments of
// similar size (at most twice what it merges so far; all of them when a
// shard has more than eight), then swaps it into the head in their place by
// compare-and-swap, removing the records it holds that have not changed
// since. Segment sizes grow geometrically, so a record is rewritten about
// log2(records / CompactAt) times, not once per compaction; a segment that
// merges every older one is the new base and drops tombstones. A record is
// read from the head, else from the newest segment that holds it. Replaced
// segments are deleted by a later compaction, after a grace period (ten
// minutes) that lets slow readers finish. Segments are immutable, so each
// process caches the decoded segments of each shard; decoded heads are
// cached by content hash.

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

// Tiers of segments: a compaction merges the head's rows with the newest
// segments whose size is at most mergeRatio times what it merges so far (so
// sizes grow geometrically and a row is rewritten about log(records/CompactAt)
// times), and with all of them when a shard has more than maxSegs.
const (
	mergeRatio = 2
	maxSegs    = 8
)

// compact moves the head's rows into a new immutable segment, merged with the
// newest segments of similar size (see mergeRatio), then swaps it into the
// head in their place, removing from the head the rows it holds that have not
// changed since. A segment that merges every older one is the new base and
// drops tombstones. Replaced segments past their grace period are deleted.
func (l *Backend) compact(ctx context.Context, s int) error {
	h0, err := l.view(ctx, s)
	if err != nil {
		return err
	}
	if len(h0.Rows) <= l.cfg.CompactAt {
		return nil
	}
	keys, segs := h0.layers()
	k, acc := 0, len(h0.Rows) // merge the newest k layers
	for i := len(segs) - 1; i >= 0; i-- {
		if len(segs[i].Rows) > mergeRatio*acc && len(segs)-k <= maxSegs {
			break
		}
		acc += len(segs[i].Rows)
		k++
	}
	full := k == len(segs) // every layer: the new base
	seg := &segment{Rows: make(map[string]*row, acc)}
	for _, from := range append(segs[len(segs)-k:], &segment{Rows: h0.Rows}) {
		for rid, w := range from.Rows {
			if full && w.Deleted {
				delete(seg.Rows, rid)
				continue
			}
			seg.Rows[rid] = w
		}
	}
	merged := keys[len(keys)-k:]
	data, err := json.Marshal(seg)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("shards/%s/base-%012d-%s.json", shardName(s), h0.Seq, nonce())
	if _, err := l.s.PutBytes(ctx, key, data, &objstore.PutOptions{If: objstore.IfAbsent(), ContentType: "application/json"}); err != nil {
		l.addUnsure(s, key) // may land later: an unused segment, deleted by the next swap
		return err
	}
	l.mu.Lock()
	l.bases[key] = seg
	l.mu.Unlock()
	// Delete the replaced segments past their grace first, and drop from the
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
		if h.Base != h0.Base || !slices.Equal(h.Segs, h0.Segs) {
			return errCompacted
		}
		// Segments of this process's earlier compactions of the shard whose
		// swap was not confirmed: one that the head does not name now never
		// will (a late swap lands only on the ETag it read, and this write
		// moves the head past it); one it names is in the trash once replaced.
		unused = unused[:0]
		for _, k := range unsure {
			if !h.names(k) {
				unused = append(unused, k)
			}
		}
		for rid, w0 := range h0.Rows {
			w, ok := h.Rows[rid]
			switch {
			case !ok && !w0.Deleted:
				// Purged since h0 (no segment held it, so no tombstone was
				// left), but the new segment holds it: bury it there.
				h.Seq++
				h.Rows[rid] = &row{Deleted: true, Change: h.Seq}
			case ok && w.Change == w0.Change:
				delete(h.Rows, rid)
			}
		}
		var keep []trash
		for _, t := range h.Trash {
			if !gone[t.Key] {
				keep = append(keep, t)
			}
		}
		for _, m := range merged {
			keep = append(keep, trash{Key: m, Since: now})
		}
		h.Trash = keep
		// The swap moves the change counter on: a head's Seq then orders its
		// lists of segments (Backend.segmentWork relies on it).
		h.Seq++
		if full {
			h.Base, h.base, h.Segs, h.segs = key, seg, nil, nil
		} else {
			n := len(h.Segs) - k
			h.Segs = append(h.Segs[:n:n], key)
			h.segs = append(h.segs[:n:n], seg)
		}
		return nil
	})
	if err != nil {
		// Not swapped in. Only when the head had moved on (another compaction
		// won) can no write of this swap land any more; after any other
		// failure a write of it may still land later, so the new segment stays
		// until the next swap of the shard settles it.
		l.addUnsure(s, unsure...)
		if !errors.Is(err, errCompacted) {
			l.addUnsure(s, key)
			return err
		}
		if cur, verr := l.view(context.WithoutCancel(ctx), s); verr == nil && !cur.names(key) {
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

// names reports whether the head names segment key: as a layer or in the trash.
func (h *head) names(key string) bool {
	return key == h.Base || slices.Contains(h.Segs, key) || slices.Contains(trashKeys(h.Trash), key)
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
