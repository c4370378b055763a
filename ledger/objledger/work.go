package objledger

import "github.com/google/btree"

// workSet is a shard's active work: every pending, failed or claimed row's
// due time (ms), by id, and the same entries ordered by due time (then id).
//
// It is persistent: clone costs O(1), and the copies share their nodes until
// either is changed (google/btree's copy-on-write). A head is cloned for
// every update, and its work is derived from its segments' on every decode;
// with a map, both copied the shard's whole backlog, so at 25,000 records of
// work per shard most of a claim's or a completion's CPU was that copy. The
// order by due time makes the earliest work O(k log W) to find, and the
// earliest due time O(log W), where a map needed a scan of all W.
//
// clone writes to the set it copies (the trees' copy-on-write context): a
// set that is shared (a cached head's, a cached segment work) is cloned under
// Backend.mu only, and never changed.
type workSet struct {
	byID  *btree.BTreeG[workItem]
	byDue *btree.BTreeG[workItem]
}

// workItem is one entry: a row's id and when a claim may take it.
type workItem struct {
	id  string
	due int64
}

// workDegree is the trees' B-tree degree (nodes of up to 63 entries).
const workDegree = 32

func newWorkSet() workSet {
	return workSet{
		byID: btree.NewG(workDegree, func(a, b workItem) bool { return a.id < b.id }),
		byDue: btree.NewG(workDegree, func(a, b workItem) bool {
			return a.due < b.due || (a.due == b.due && a.id < b.id)
		}),
	}
}

// clone returns a copy that can be changed without changing w (see above for
// when w may be cloned). The zero workSet clones to an empty one.
func (w workSet) clone() workSet {
	if w.byID == nil {
		return newWorkSet()
	}
	return workSet{byID: w.byID.Clone(), byDue: w.byDue.Clone()}
}

// len is the number of entries.
func (w workSet) len() int {
	if w.byID == nil {
		return 0
	}
	return w.byID.Len()
}

// get returns id's due time.
func (w workSet) get(id string) (int64, bool) {
	if w.byID == nil {
		return 0, false
	}
	it, ok := w.byID.Get(workItem{id: id})
	return it.due, ok
}

// set makes id due at due.
func (w workSet) set(id string, due int64) {
	it := workItem{id: id, due: due}
	if old, ok := w.byID.ReplaceOrInsert(it); ok {
		if old.due == due {
			return
		}
		w.byDue.Delete(old)
	}
	w.byDue.ReplaceOrInsert(it)
}

// del removes id's entry, if any.
func (w workSet) del(id string) {
	if old, ok := w.byID.Delete(workItem{id: id}); ok {
		w.byDue.Delete(old)
	}
}

// min is the earliest due time (ok false if there is no work).
func (w workSet) min() (int64, bool) {
	if w.byDue == nil {
		return 0, false
	}
	it, ok := w.byDue.Min()
	return it.due, ok
}

// dueBy counts the entries due at now, up to limit (it stops counting there:
// callers only compare the count with what they may claim).
func (w workSet) dueBy(now int64, limit int) int {
	n := 0
	if w.byDue == nil || limit <= 0 {
		return 0
	}
	w.byDue.Ascend(func(it workItem) bool {
		if it.due > now {
			return false
		}
		n++
		return n < limit
	})
	return n
}

// earliest returns the k earliest entries due at now, in order (all of them
// if k < 0), and whether more were due.
func (w workSet) earliest(now int64, k int) (cs []cand, more bool) {
	if w.byDue == nil {
		return nil, false
	}
	w.byDue.Ascend(func(it workItem) bool {
		if it.due > now {
			return false
		}
		if k >= 0 && len(cs) == k {
			more = true
			return false
		}
		cs = append(cs, cand(it))
		return true
	})
	return cs, more
}

// ids calls fn with every entry's id, in id order, until fn returns false.
func (w workSet) ids(fn func(id string) bool) {
	if w.byID == nil {
		return
	}
	w.byID.Ascend(func(it workItem) bool { return fn(it.id) })
}
