package folder_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// lateIntents makes intent writes land late: the first n of them, or all of
// them while on is set.
func lateIntents(n int64, on *atomic.Bool) faulty.Rule {
	var seen atomic.Int64
	return func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if op == faulty.OpPut && strings.HasSuffix(key, "/intent.json") && (seen.Add(1) <= n || on.Load()) {
			return faulty.LateApply, 0
		}
		return faulty.None, 0
	}
}

// An intent write whose response never came is resolved by the operation
// itself (asked again with the same bytes: created, or found to be ours), so
// a late-landing intent neither fails the operation nor turns up after it as
// a journal for Recover to run again (the finished journal is a tombstone,
// so the late if-absent write finds its key taken). Before, the rename failed
// and the late intent landed afterwards: a journal of an operation its caller
// was told had failed.
func TestLateIntentResolved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.Open()
	var off atomic.Bool
	fb := faulty.New(inner.Backend(), &faulty.Options{LateDelay: 50 * time.Millisecond, Rule: lateIntents(1, &off)})
	s := objstore.New(fb, nil)
	ops := folder.New(s, &folder.Options{TombstoneGrace: time.Nanosecond})
	defer ops.Close()
	want := fill(t, inner, "src/", 2)
	if _, err := ops.Rename(ctx, "src/", "dst/", false); err != nil {
		t.Fatalf("rename with one late intent write: %v", err)
	}
	fb.Wait() // the late intent write fails: its key holds the tombstone
	if got := contents(t, inner, "dst/"); !equal(got, want) {
		t.Fatalf("%d objects at dst, want %d", len(got), len(want))
	}
	rep, err := ops.Recover(ctx)
	if err != nil || len(rep.Finished) != 0 || rep.Tombstones != 1 {
		t.Fatalf("recover after the rename: %+v %v; want nothing to finish and one tombstone removed", rep, err)
	}
	noJournal(t, inner)
}

// An intent that lands after its operation gave up is run by the next
// Recover only if the operation's preconditions still hold, checked under
// its locks: here the destination was written meanwhile, so the journal is
// dropped and the destination left alone. Before, Recover renamed over it.
func TestLateIntentAfterGivingUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.Open()
	var on atomic.Bool
	fb := faulty.New(inner.Backend(), &faulty.Options{LateDelay: 150 * time.Millisecond, Rule: lateIntents(0, &on)})
	s := objstore.New(fb, nil)
	ops := folder.New(s, nil)
	defer ops.Close()
	fill(t, inner, "src/", 1)
	on.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := ops.Rename(rctx, "src/", "dst/", false)
	cancel()
	on.Store(false)
	if err == nil {
		t.Fatal("renamed although every intent write was late")
	}
	// The caller was told it failed; someone now fills the destination.
	theirs := map[string][32]byte{}
	for _, k := range keys {
		data := []byte("theirs: " + k)
		if _, err := inner.PutBytes(ctx, "dst/"+k, data, &objstore.PutOptions{ContentType: "text/x-test", Metadata: map[string]string{"origin": "fill"}}); err != nil {
			t.Fatal(err)
		}
		theirs[k] = sha256.Sum256(data)
	}
	fb.Wait() // the intent lands
	rep, err := ops.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if got := contents(t, inner, "dst/"); !equal(got, theirs) {
		t.Fatalf("a late intent's rename overwrote a destination written after the rename gave up (report %+v)", rep)
	}
	noJournal(t, inner)
}

// Random renames, copies and deletes over a few folders through late-landing
// writes, lost requests and lost responses (5% each; locks on the same
// faulty store). After each operation — and Recover until it succeeds when it
// fails — the store is the model with the operation applied, or, when it
// failed, possibly without; no journal is left at the end.
func TestRandomOpsLateLanding(t *testing.T) {
	t.Parallel()
	randomOps(t, mem.Open())
}

// The same on MinIO, which enforces neither conditional copy destinations nor
// conditional deletes (so copies and deletes are unconditional there).
func TestRandomOpsLateLandingMinIO(t *testing.T) {
	t.Parallel()
	b, _ := testenv.NewBucket(t, testenv.S3(t))
	randomOps(t, objstore.New(b, nil))
}

func randomOps(t *testing.T, inner *objstore.Store) {
	ctx := context.Background()
	fb := faulty.New(inner.Backend(), nil)
	s := objstore.New(fb, nil)
	if _, err := s.Capabilities(ctx); err != nil { // probed before the faults start
		t.Fatal(err)
	}
	fb.SetOptions(faulty.Options{Seed: 15, LateApplyRate: 0.05, LostRequestRate: 0.05, LostResponseRate: 0.05,
		LateJitter: 20 * time.Millisecond})
	tl := treelock.New(s, &treelock.Options{TTL: 2 * time.Second, Poll: 2 * time.Millisecond})
	defer tl.Close()
	ops := folder.New(s, &folder.Options{Locker: folder.TreeLocker{M: tl}, ChunkSize: 3, Concurrency: 4})
	folders := []string{"f0/", "f1/", "f2/"}
	model := map[string]string{} // key → content
	version := 0
	write := func(prefix string) {
		for i := range 4 {
			version++
			k, v := fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("v%d", version) // unique content: no two writes share an ETag
			if _, err := inner.PutBytes(ctx, k, []byte(v), nil); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		}
	}
	state := func() map[string]string {
		out := map[string]string{}
		for info, err := range inner.List(ctx, "", nil) {
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(info.Key, folder.JournalPrefix) || strings.HasPrefix(info.Key, folder.LockPrefix) {
				continue
			}
			data, _, err := inner.GetBytes(ctx, info.Key)
			if err != nil {
				t.Fatal(err)
			}
			out[info.Key] = string(data)
		}
		return out
	}
	apply := func(m map[string]string, op, src, dst string) map[string]string {
		out := maps.Clone(m)
		for k, v := range m {
			if !strings.HasPrefix(k, src) {
				continue
			}
			if op != "delete" {
				out[dst+strings.TrimPrefix(k, src)] = v
			}
			if op != "copy" {
				delete(out, k)
			}
		}
		return out
	}
	write(folders[0])
	rng := rand.New(rand.NewPCG(15, 15))
	failed := 0
	for i := range 30 {
		src := folders[rng.IntN(len(folders))]
		dst := folders[rng.IntN(len(folders))]
		op := []string{"rename", "copy", "delete"}[rng.IntN(3)]
		empty := func(p string) bool {
			return !slices.ContainsFunc(slices.Collect(maps.Keys(model)), func(k string) bool { return strings.HasPrefix(k, p) })
		}
		if empty(src) {
			write(src)
		}
		if op != "delete" && (src == dst || !empty(dst)) {
			op = "delete"
		}
		var err error
		switch op {
		case "rename":
			_, err = ops.Rename(ctx, src, dst, false)
		case "copy":
			_, err = ops.Copy(ctx, src, dst, false)
		default:
			_, err = ops.Delete(ctx, src)
		}
		if err != nil {
			failed++
			for attempt := 0; ; attempt++ {
				fb.Wait()
				if _, rerr := ops.Recover(ctx); rerr == nil {
					break
				} else if attempt > 20 {
					t.Fatalf("op %d: recover keeps failing: %v", i, rerr)
				}
			}
		}
		fb.Wait()
		got, done := state(), apply(model, op, src, dst)
		switch {
		case maps.Equal(got, done):
			model = done
		case err != nil && maps.Equal(got, model):
			// failed before it began: nothing changed
		default:
			t.Fatalf("op %d %s %s→%s (err %v): store %v\nwant %v\nor (failed) %v", i, op, src, dst, err, got, done, model)
		}
	}
	fb.Wait()
	// Tombstones of journals whose intent write was late are removed past
	// their grace (none here).
	if _, err := folder.New(inner, &folder.Options{Locker: folder.TreeLocker{M: tl}, TombstoneGrace: time.Nanosecond}).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	noJournal(t, inner)
	if got := state(); !maps.Equal(got, model) {
		t.Fatalf("end: store %v, want %v", got, model)
	}
	t.Logf("30 operations, %d failed and recovered; faults %+v", failed, fb.Stats())
}
