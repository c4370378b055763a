package docstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func slowMem(latency time.Duration) *objstore.Store {
	return objstore.New(faulty.New(mem.OpenBackend(""), &faulty.Options{Latency: latency}), nil)
}

// incrementAll increments counter "n" each times in each of goroutines
// goroutines, and waits for them.
func incrementAll(t *testing.T, c docstore.Doc[int], goroutines, each int) {
	t.Helper()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				if _, _, err := c.Update(t.Context(), "n", func(v *int, _ docstore.Meta) error { *v++; return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestGroupCommitExactTotal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(slowMem(500*time.Microsecond), nil)
	c := docstore.Typed[int](d)
	const goroutines, each = 16, 40
	incrementAll(t, c, goroutines, each)
	v, m, err := c.Load(ctx, "n")
	if err != nil || v != goroutines*each {
		t.Fatalf("counter = %d (%v) after %d increments", v, err, goroutines*each)
	}
	st := d.Stats()
	if st.Writes >= st.Updates {
		t.Errorf("%d writes for %d updates: group commit combined nothing", st.Writes, st.Updates)
	}
	if m.Rev != int64(st.Writes) {
		t.Errorf("rev %d, writes %d: every successful write must add one revision", m.Rev, st.Writes)
	}
	t.Logf("%d updates in %d writes", st.Updates, st.Writes)
}

// A failing function fails only its own caller; the others in its batch commit.
func TestGroupCommitIsolatesErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(slowMem(time.Millisecond), nil)
	c := docstore.Typed[[]int](d)
	errOdd := errors.New("odd callers refuse")
	var wg sync.WaitGroup
	results := make([]error, 40)
	for i := range results {
		wg.Go(func() {
			_, _, results[i] = c.Update(ctx, "list", func(v *[]int, _ docstore.Meta) error {
				if i%2 == 1 {
					*v = append(*v, -1) // must not leak into the committed value
					return fmt.Errorf("caller %d: %w", i, errOdd)
				}
				*v = append(*v, i)
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range results {
		if i%2 == 1 && !errors.Is(err, errOdd) {
			t.Errorf("caller %d: %v, want its own error", i, err)
		}
		if i%2 == 0 && err != nil {
			t.Errorf("caller %d: %v, want success", i, err)
		}
	}
	v, _, err := c.Load(ctx, "list")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(v)
	want := []int{}
	for i := 0; i < 40; i += 2 {
		want = append(want, i)
	}
	if !slices.Equal(v, want) {
		t.Fatalf("committed %v, want exactly the even callers' values", v)
	}
}

// Every write's response is lost after the server applied it: each Update must
// still be applied exactly once.
func TestLostResponsesAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("")
	f := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
		if op == faulty.OpPut {
			return faulty.LostResponse, 0
		}
		return faulty.None, 0
	}})
	d := docstore.New(objstore.New(f, nil), &docstore.Options{NoGroupCommit: true})
	c := docstore.Typed[int](d)
	for i := range 20 {
		v, _, err := c.Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v++; return nil })
		if err != nil || v != i+1 {
			t.Fatalf("update %d: %d, %v", i, v, err)
		}
	}
	v, _, _ := docstore.Typed[int](docstore.New(objstore.New(inner, nil), nil)).Load(ctx, "n")
	if v != 20 {
		t.Fatalf("counter = %d after 20 updates with lost responses", v)
	}
	if st := d.Stats(); st.Resolved != 20 {
		t.Errorf("stats %+v, want 20 resolved", st)
	}
}

// When the history window has moved past a lost write, Update must say it does
// not know (ErrAmbiguous), never guess and apply twice.
func TestLostResponseBeyondHistoryIsAmbiguous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("")
	victim := &struct {
		sync.Mutex
		armed bool
	}{}
	other := docstore.New(objstore.New(inner, nil), &docstore.Options{NoGroupCommit: true, HistoryLen: 2})
	f := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
		victim.Lock()
		defer victim.Unlock()
		if op == faulty.OpPut && victim.armed {
			victim.armed = false
			return faulty.LostResponse, 0
		}
		return faulty.None, 0
	}})
	// After the victim's write lands and before it reads back, others write 3 times.
	d := docstore.New(objstore.New(hookAfterPut{f, func() {
		for range 3 {
			_, _, _ = docstore.Typed[int](other).Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v += 100; return nil })
		}
	}}, nil), &docstore.Options{NoGroupCommit: true, HistoryLen: 2})
	if _, err := docstore.Typed[int](d).Create(ctx, "n", 0); err != nil {
		t.Fatal(err)
	}
	victim.Lock()
	victim.armed = true
	victim.Unlock()
	_, _, err := docstore.Typed[int](d).Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v++; return nil })
	if !errors.Is(err, objstore.ErrAmbiguous) {
		t.Fatalf("lost write beyond the history window: %v, want ErrAmbiguous", err)
	}
	v, _, _ := docstore.Typed[int](other).Load(ctx, "n")
	if v != 301 {
		t.Fatalf("counter = %d, want 301 (the victim's +1 applied exactly once, plus 3×100)", v)
	}
}

// hookAfterPut runs hook after each put that returned an ambiguous error.
type hookAfterPut struct {
	*faulty.Backend
	hook func()
}

func (h hookAfterPut) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	info, err := h.Backend.Put(ctx, key, body, size, opts)
	if errors.Is(err, objstore.ErrAmbiguous) {
		h.hook()
	}
	return info, err
}

// Writing back identical content still changes the ETag: no ABA.
func TestNoABA(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(mem.Open(), nil)
	c := docstore.Typed[string](d)
	m1, err := c.Create(ctx, "k", "A")
	if err != nil {
		t.Fatal(err)
	}
	_, m2, _ := c.Update(ctx, "k", func(v *string, _ docstore.Meta) error { *v = "B"; return nil })
	_, m3, _ := c.Update(ctx, "k", func(v *string, _ docstore.Meta) error { *v = "A"; return nil })
	if m1.ETag == m3.ETag || m1.ETag == m2.ETag {
		t.Fatalf("ETags %s %s %s: A→B→A must not repeat an ETag", m1.ETag, m2.ETag, m3.ETag)
	}
	_, err = d.Objects().PutBytes(ctx, "k", []byte(`"stale"`), &objstore.PutOptions{If: objstore.IfMatch(m1.ETag)})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("CAS with the ETag of the first A: %v, want ErrPreconditionFailed", err)
	}
}

func TestCreateAndLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(mem.Open(), nil)
	c := docstore.Typed[map[string]int](d)
	if _, _, err := c.Load(ctx, "m"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("load missing: %v", err)
	}
	if _, err := c.Create(ctx, "m", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, "m", map[string]int{"b": 2}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create: %v, want ErrPreconditionFailed", err)
	}
	v, m, err := c.Load(ctx, "m")
	if err != nil || v["a"] != 1 || m.Rev != 1 {
		t.Fatalf("load: %v %+v %v", v, m, err)
	}
	// A plain JSON file from another tool is revision 0 and gets wrapped.
	if _, err := d.Objects().PutBytes(ctx, "plain.json", []byte(`{"a": 7}`), nil); err != nil {
		t.Fatal(err)
	}
	v, m, err = c.Update(ctx, "plain.json", func(v *map[string]int, m docstore.Meta) error {
		if !m.Exists || m.Rev != 0 {
			return fmt.Errorf("meta %+v", m)
		}
		(*v)["a"]++
		return nil
	})
	if err != nil || v["a"] != 8 || m.Rev != 1 {
		t.Fatalf("update of a plain JSON file: %v %+v %v", v, m, err)
	}
	// Raw bytes round-trip exactly, including bytes that look like JSON.
	for _, b := range [][]byte{[]byte("\x00\xffbinary"), []byte(`{ "spaced" : 1 }`)} {
		if _, _, err := d.UpdateBytes(ctx, "raw", func([]byte, docstore.Meta) ([]byte, error) { return b, nil }); err != nil {
			t.Fatal(err)
		}
		got, _, err := d.LoadBytes(ctx, "raw")
		if err != nil || string(got) != string(b) {
			t.Fatalf("raw round trip: %q %v, want %q", got, err, b)
		}
	}
}

func TestContextCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	d := docstore.New(slowMem(20*time.Millisecond), nil)
	c := docstore.Typed[int](d)
	bg := context.Background()
	go func() { _, _, _ = c.Update(bg, "n", func(v *int, _ docstore.Meta) error { *v++; return nil }) }()
	time.Sleep(5 * time.Millisecond) // the first commit is in flight
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, _, err := c.Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v += 1000; return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled update: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	v, _, _ := c.Load(bg, "n")
	if v >= 1000 {
		t.Fatalf("a cancelled update was applied: %d", v)
	}
}

func TestContention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	d := docstore.New(s, &docstore.Options{NoGroupCommit: true, MaxAttempts: 1})
	c := docstore.Typed[int](d)
	if _, err := c.Create(ctx, "n", 0); err != nil {
		t.Fatal(err)
	}
	// Another writer changes the document inside our function every time.
	_, _, err := c.Update(ctx, "n", func(v *int, _ docstore.Meta) error {
		_, _, _ = docstore.Typed[int](docstore.New(s, nil)).Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v += 10; return nil })
		*v++
		return nil
	})
	if !errors.Is(err, docstore.ErrContention) || !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("exhausted attempts: %v, want ErrContention wrapping ErrPreconditionFailed", err)
	}
}

func TestRegisterFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	liar := objstore.New(faulty.New(mem.OpenBackend(""), &faulty.Options{IgnoreConditions: true}), nil)

	strict := docstore.Typed[int](docstore.New(liar, nil))
	if _, _, err := strict.Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v++; return nil }); !errors.Is(err, objstore.ErrNotSupported) {
		t.Fatalf("update on a store without conditions: %v, want ErrNotSupported", err)
	}
	if _, err := strict.Create(ctx, "n", 1); !errors.Is(err, objstore.ErrNotSupported) {
		t.Fatalf("create on a store without conditions: %v, want ErrNotSupported", err)
	}

	d := docstore.New(liar, &docstore.Options{LastWriterWins: true, RegisterGrace: time.Nanosecond})
	c := docstore.Typed[string](d)
	// One writer: read-after-update, every time.
	for i := range 30 {
		want := fmt.Sprintf("v%d", i)
		if _, _, err := c.Update(ctx, "reg", func(v *string, _ docstore.Meta) error { *v = want; return nil }); err != nil {
			t.Fatal(err)
		}
		if got, _, err := c.Load(ctx, "reg"); err != nil || got != want {
			t.Fatalf("read after update %d: %q %v", i, got, err)
		}
	}
	// Many writers and readers: no errors, and reads only see written values.
	var wg sync.WaitGroup
	written := sync.Map{}
	for w := range 4 {
		wg.Go(func() {
			for i := range 15 {
				val := fmt.Sprintf("w%d-%d", w, i)
				written.Store(val, true)
				if _, _, err := c.Update(ctx, "reg", func(v *string, _ docstore.Meta) error { *v = val; return nil }); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for range 15 {
				got, _, err := c.Load(ctx, "reg")
				if err != nil {
					t.Error(err)
					continue
				}
				if _, ok := written.Load(got); !ok && !strings.HasPrefix(got, "v") {
					t.Errorf("read %q, which nobody wrote", got)
				}
			}
		})
	}
	wg.Wait()
	// Cleanup never removes the newest: the register still reads, and holds few versions.
	if _, _, err := c.Load(ctx, "reg"); err != nil {
		t.Fatal(err)
	}
	vs, err := liar.ListAll(ctx, "reg/", nil)
	if err != nil || len(vs) == 0 || len(vs) > 8 {
		t.Fatalf("%d versions left (%v); want the newest and at most a few racing ones", len(vs), err)
	}
}

// Writers that update one document in a loop come back for their next update
// microseconds after their answer. The committer waits that long for them
// (a fraction of a write), so batches stay full: without the wait, the first
// writer back was written alone and the others a whole write later, and
// batches alternated between one update and the rest (8 updates per write
// here). In a synctest bubble, so that time moves only when every writer is
// blocked: a loaded machine cannot starve a writer past the wait.
func TestGroupCommitGathersLoopingWriters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := docstore.New(slowMem(8*time.Millisecond), nil)
		defer d.Close()
		c := docstore.Typed[int](d)
		const goroutines, each = 16, 30
		incrementAll(t, c, goroutines, each)
		if v, _, err := c.Load(ctx, "n"); err != nil || v != goroutines*each {
			t.Fatalf("counter = %d (%v) after %d increments", v, err, goroutines*each)
		}
		st := d.Stats()
		per := float64(st.Updates) / float64(st.Writes)
		t.Logf("%d updates in %d writes: %.1f per write", st.Updates, st.Writes, per)
		if per < 14 {
			t.Errorf("%.1f updates per write with %d writers in a loop: batches are not gathered", per, goroutines)
		}
	})
}

// A lingering update (a ledger's completion) is not waited for: after a batch
// of one urgent update and lingering ones, the next urgent update is written
// at once, not after the gather's wait.
func TestGatherWaitsOnlyForUrgentUpdates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := docstore.New(slowMem(8*time.Millisecond), nil)
		defer d.Close()
		c := docstore.Typed[int](d)
		add := func(v *int, _ docstore.Meta) error { *v++; return nil }
		if _, _, err := c.Update(ctx, "n", add); err != nil { // the document exists: one write a batch
			t.Fatal(err)
		}
		// A write in flight; behind it, one urgent update and three lingering ones.
		var wg sync.WaitGroup
		wg.Go(func() { _, _, _ = c.Update(ctx, "n", add) })
		synctest.Wait()
		for range 3 {
			wg.Go(func() { _, _, _ = c.Update(docstore.WithLinger(ctx, time.Hour), "n", add) })
		}
		wg.Go(func() { _, _, _ = c.Update(ctx, "n", add) })
		wg.Wait() // the second batch held one urgent update
		t0 := time.Now()
		if _, _, err := c.Update(ctx, "n", add); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took != 8*time.Millisecond {
			t.Errorf("an urgent update after a batch of one urgent and three lingering updates took %v, want one write (8ms): the gather waited for lingering callers", took)
		}
	})
}
