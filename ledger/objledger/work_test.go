package objledger

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// workModel is what a workSet must answer: a map, scanned.
type workModel map[string]int64

func (m workModel) earliest(now int64, k int) ([]cand, bool) {
	var cs []cand
	for id, d := range m {
		if d <= now {
			cs = append(cs, cand{id, d})
		}
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.id, b.id)) })
	if k >= 0 && len(cs) > k {
		return cs[:k], true
	}
	return cs, false
}

func checkWork(t *testing.T, step int, w workSet, m workModel) {
	t.Helper()
	if w.len() != len(m) {
		t.Fatalf("step %d: len %d, want %d", step, w.len(), len(m))
	}
	for id, d := range m {
		if got, ok := w.get(id); !ok || got != d {
			t.Fatalf("step %d: get(%q) = %d %v, want %d", step, id, got, ok, d)
		}
	}
	var ids []string
	w.ids(func(id string) bool { ids = append(ids, id); return true })
	if want := slices.Sorted(maps.Keys(m)); !slices.Equal(ids, want) {
		t.Fatalf("step %d: ids %v, want %v", step, ids, want)
	}
	gotMin, ok := w.min()
	wantMin, wantOK := int64(0), len(m) > 0
	if wantOK {
		wantMin = slices.Min(slices.Collect(maps.Values(m)))
	}
	if ok != wantOK || gotMin != wantMin {
		t.Fatalf("step %d: min %d %v, want %d %v", step, gotMin, ok, wantMin, wantOK)
	}
	for _, now := range []int64{-1, 0, 5, 10, 50, 100} {
		all, _ := m.earliest(now, -1)
		for _, limit := range []int{0, 1, 3, 1 << 20} {
			if got, want := w.dueBy(now, limit), min(len(all), limit); got != want {
				t.Fatalf("step %d: dueBy(%d, %d) = %d, want %d", step, now, limit, got, want)
			}
		}
		for _, k := range []int{-1, 0, 1, 4} {
			got, more := w.earliest(now, k)
			want, wantMore := m.earliest(now, k)
			if !slices.Equal(got, want) || more != wantMore {
				t.Fatalf("step %d: earliest(%d, %d) = %v %v, want %v %v", step, now, k, got, more, want, wantMore)
			}
		}
	}
}

// TestWorkSetIsAMap runs random changes on workSets and their clones beside
// maps: every answer matches the map's, and a clone never sees its original's
// later changes, nor the original its clone's.
func TestWorkSetIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type pair struct {
		w workSet
		m workModel
	}
	sets := []pair{{newWorkSet(), workModel{}}}
	for step := range 3000 {
		i := rng.IntN(len(sets))
		p := sets[i]
		id := fmt.Sprintf("k%02d", rng.IntN(40))
		switch op := rng.IntN(10); {
		case op < 6:
			d := int64(rng.IntN(60)) // ties on due times are common
			p.w.set(id, d)
			p.m[id] = d
		case op < 9:
			p.w.del(id)
			delete(p.m, id)
		default:
			sets = append(sets, pair{p.w.clone(), maps.Clone(p.m)})
			if len(sets) > 8 {
				sets = sets[1:]
			}
		}
		for j, q := range sets {
			checkWork(t, step*10+j, q.w, q.m)
		}
	}
	var zero workSet
	checkWork(t, -1, zero, workModel{})
	if c := zero.clone(); c.len() != 0 {
		t.Fatal("a clone of the zero workSet is not empty")
	}
}

func BenchmarkHeadClone(b *testing.B) {
	// A shard with a backlog of 25,000 records of work (a million events over
	// 100,000 keys, four shards: shards=4): a head is cloned for every update.
	h := &head{Rows: map[string]*row{}, Work: newWorkSet()}
	for i := range 25_000 {
		h.Work.set(fmt.Sprintf("b/key-%06d", i), int64(i))
	}
	for b.Loop() {
		c := h.clone()
		c.put("b/key-000001", &row{Status: "done"})
	}
}

// TestDerivedWorkIsTheRows runs two ledger instances ("processes") on one
// store, with compactions every few records, purges (tombstones over rows of
// older segments) and new bases: after every step, the work each derives for
// the shard (incrementally, from its last segments' work) is what the rows
// say, computed afresh.
func TestDerivedWorkIsTheRows(t *testing.T) {
	ctx := context.Background()
	s := mem.Open()
	clock, advance := NewTestClock()
	var ls []*Backend
	for range 2 {
		l, err := OpenBackend(ctx, s, &ledger.Options{Now: clock}, &Options{Shards: 1, CompactAt: 3, Grace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var held []ledger.Claim
	var versions [][]byte // every head seen, oldest first
	incremental := 0
	for step := range 400 {
		l := ls[rng.IntN(len(ls))]
		advance(time.Second)
		switch op := rng.IntN(10); {
		case op < 4:
			var evs []event.Event
			for range 1 + rng.IntN(4) {
				evs = append(evs, rev(fmt.Sprintf("k%02d", rng.IntN(30)), fmt.Sprintf("%06d", step), ""))
			}
			if _, _, err := l.RecordAndClaim(ctx, "t", evs, 0, 0); err != nil {
				t.Fatal(err)
			}
		case op < 6:
			cs, err := l.Claim(ctx, 1+rng.IntN(4), time.Duration(1+rng.IntN(5))*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, cs...)
		case op < 8 && len(held) > 0:
			k := rng.IntN(len(held) + 1)
			_, _ = l.CompleteBatch(ctx, held[:k], make([]string, k)) // a lost lease is refused: fine
			held = held[k:]
		case op == 8:
			if _, err := l.Purge(ctx, clock().Add(-time.Duration(rng.IntN(60))*time.Second), true); err != nil {
				t.Fatal(err)
			}
		default:
			if err := l.Compact(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
		if data, err := ls[0].load(ctx, headKey(0)); err == nil && data != nil {
			versions = append(versions, data)
		}
		if step%7 == 0 && len(versions) > 1 {
			// A slow reader decodes a head older than the one it decoded last.
			l := ls[rng.IntN(len(ls))]
			h, err := l.decodeHead(ctx, 0, versions[rng.IntN(len(versions)-1)])
			if err != nil {
				t.Fatal(err)
			}
			checkDerived(t, step, -1, h)
		}
		for i, l := range ls {
			for { // background compactions
				l.mu.Lock()
				busy := l.compacting[0]
				l.mu.Unlock()
				if !busy {
					break
				}
				time.Sleep(time.Millisecond)
			}
			l.mu.Lock()
			before := l.segWork[0]
			l.mu.Unlock()
			h, err := l.view(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			l.mu.Lock()
			after := l.segWork[0]
			l.mu.Unlock()
			if before.key != after.key && before.work.byID != nil && before.succeeds(after.keys, after.seq) {
				incremental++
			}
			checkDerived(t, step, i, h)
		}
	}
	if incremental == 0 {
		t.Fatal("no segment work was derived incrementally: the test did not test it")
	}
	t.Logf("%d incremental derivations", incremental)
}

// checkDerived fails unless h's work is what its rows say, computed afresh.
func checkDerived(t *testing.T, step, instance int, h *head) {
	t.Helper()
	_, layers := h.layers()
	fresh := segmentWork(layers)
	layerWork(fresh, h.Rows)
	var got, want workModel = map[string]int64{}, map[string]int64{}
	h.Work.ids(func(id string) bool { got[id], _ = h.Work.get(id); return true })
	fresh.ids(func(id string) bool { want[id], _ = fresh.get(id); return true })
	if !maps.Equal(got, want) {
		t.Fatalf("step %d, instance %d: derived work %v, the rows say %v", step, instance, got, want)
	}
}

// NewTestClock is a settable clock safe to read from background compactions:
// now, and advance to move it on (exported for the package's external tests).
func NewTestClock() (now func() time.Time, advance func(time.Duration)) {
	var at atomic.Int64
	at.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	return func() time.Time { return time.UnixMilli(at.Load()) }, func(d time.Duration) { at.Add(d.Milliseconds()) }
}
