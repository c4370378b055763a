package objledger

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestEncodeHeadIsMarshal: the cached encoder writes exactly what
// json.Marshal writes for the head, through a run of writes that add, change
// (a new row, as put does), tombstone and drop rows, with hostile ids and
// values, a row pointer shared by two ids, and heads from another process
// (fresh pointers).
func TestEncodeHeadIsMarshal(t *testing.T) {
	var c rowCache
	rng := rand.New(rand.NewPCG(1, 2))
	odd := []string{"plain", "a<b>&c", "\u2028\u2029", "ünï 日本", "100%/x%2Fy/../z", "q\"uote\\", "ctl\x01\x1f", "bad\xffutf8", "+ space"}
	h := &head{Rows: map[string]*row{}, Work: newWorkSet()}
	check := func(step int) {
		t.Helper()
		got, err := c.encodeHead(0, h)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("step %d:\n got %s\nwant %s", step, got, want)
		}
	}
	check(-1)
	for step := range 300 {
		switch k := rng.IntN(10); {
		case k < 5: // put a new or changed row
			id := fmt.Sprintf("b\x00%s/%d", odd[rng.IntN(len(odd))], rng.IntN(40))
			h.put(id, &row{Bucket: "b", Key: odd[rng.IntN(len(odd))], ETag: fmt.Sprint(step), Status: "pending",
				NextAttempt: int64(step), LastError: odd[rng.IntN(len(odd))], Result: "<&>"})
		case k < 6 && len(h.Rows) > 0: // tombstone
			for id := range h.Rows {
				h.Rows[id] = &row{Deleted: true, Change: h.Seq}
				break
			}
		case k < 7 && len(h.Rows) > 0: // a compaction dropped rows
			for id := range h.Rows {
				delete(h.Rows, id)
				if rng.IntN(2) == 0 {
					break
				}
			}
		case k < 8 && len(h.Rows) > 1: // one row pointer under two ids
			var ids []string
			for id := range h.Rows {
				ids = append(ids, id)
			}
			h.Rows[ids[0]] = h.Rows[ids[1]]
		case k < 9: // the head as another process wrote it: fresh pointers
			data, _ := json.Marshal(h)
			var fresh head
			if err := json.Unmarshal(data, &fresh); err != nil {
				t.Fatal(err)
			}
			fresh.Work = h.Work
			h = &fresh
		default:
			h.Base = fmt.Sprintf("shards/000/base-%d.json", step)
			h.Segs = append(h.Segs, fmt.Sprintf("shards/000/base-%d-<&>.json", step))
			h.Trash = append(h.Trash, trash{Key: "shards/000/base-old", Since: int64(step)})
		}
		h = h.clone() // as update does: the cached head is never written to
		check(step)
	}
	h.Rows = nil
	check(1000)
}

// BenchmarkEncodeHead: a full head (CompactAt rows) after one row changed,
// with json.Marshal (the baseline) and with the row cache.
func BenchmarkEncodeHead(b *testing.B) {
	h := &head{Rows: map[string]*row{}, Work: newWorkSet(), Base: "shards/000/base-1.json"}
	for i := range 128 {
		h.put(fmt.Sprintf("bench\x00some/key/of/an/object-%06d", i), &row{Bucket: "bench", Key: fmt.Sprintf("some/key/of/an/object-%06d", i),
			ETag: "0123456789abcdef0123456789abcdef", Seq: "0000000000000001", Status: "pending", NextAttempt: 1700000000000, FirstSeen: 1700000000000, Updated: 1700000000000, Source: "webhook", Format: "minio"})
	}
	b.Run("baseline=json.Marshal", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h.put(fmt.Sprintf("bench\x00some/key/of/an/object-%06d", i%128), &row{Bucket: "bench", Status: "claimed", Token: int64(i)})
			if _, err := json.Marshal(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("row-cache", func(b *testing.B) {
		var c rowCache
		for i := 0; b.Loop(); i++ {
			h.put(fmt.Sprintf("bench\x00some/key/of/an/object-%06d", i%128), &row{Bucket: "bench", Status: "claimed", Token: int64(i)})
			if _, err := c.encodeHead(0, h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
