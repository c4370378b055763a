package fence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestPutRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	const key = "out/a"

	// A plain object has recorded no token: any token may replace it.
	if _, err := s.PutBytes(ctx, key, []byte("plain"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("t0"), 0, nil); err != nil {
		t.Fatalf("token 0 over a plain object: %v", err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("t5"), 5, nil); err != nil {
		t.Fatalf("token 5: %v", err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("t5 again"), 5, nil); err != nil {
		t.Fatalf("equal token (the same holder rewriting) must be allowed: %v", err)
	}
	_, err := fence.PutBytes(ctx, s, key, []byte("t4"), 4, nil)
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Token != 4 || se.Highest != 5 {
		t.Fatalf("token 4 after 5: %v, want a StaleError naming 4 and 5", err)
	}
	for _, s := range []error{objstore.ErrPreconditionFailed, objstore.ErrAmbiguous, objstore.ErrNotFound, objstore.ErrConflict} {
		if errors.Is(err, s) {
			t.Fatalf("ErrStale must wrap nothing else, but is %v", s)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "token 4") || !strings.Contains(msg, "token 5") || !strings.Contains(msg, "nothing was written") {
		t.Fatalf("message %q must name both tokens and say nothing was written", msg)
	}
	body, m, err := fence.Get(ctx, s, key)
	if err != nil || string(body) != "t5 again" || m.Token != 5 {
		t.Fatalf("after the refusal: %q token %d %v, want the token-5 rewrite", body, m.Token, err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("neg"), -1, nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("a negative token: %v, want ErrInvalidArgument", err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("x"), 9, &fence.Options{Metadata: map[string]string{"Cairn-Fence": "99"}}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("metadata that would forge the token: %v, want ErrInvalidArgument", err)
	}
	if tok, _ := fence.Token(ctx, s, key); tok != 5 {
		t.Fatalf("token after refused writes: %d, want 5", tok)
	}
}

func TestDeleteKeepsTheToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	const key = "out/b"
	if err := fence.Delete(ctx, s, key, 2, nil); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("stale"), 1, nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 1 after a token-2 delete of a missing key: %v, want ErrStale", err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("v3"), 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := fence.Delete(ctx, s, key, 2, nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale delete: %v, want ErrStale", err)
	}
	if b, _, err := fence.Get(ctx, s, key); err != nil || string(b) != "v3" {
		t.Fatalf("after a stale delete: %q %v", b, err)
	}
	if err := fence.Delete(ctx, s, key, 4, nil); err != nil {
		t.Fatal(err)
	}
	if _, m, err := fence.Get(ctx, s, key); !errors.Is(err, objstore.ErrNotFound) || !m.Deleted || m.Token != 4 {
		t.Fatalf("Get of a tombstone: %+v %v, want ErrNotFound", m, err)
	}
	if _, err := fence.PutBytes(ctx, s, key, []byte("stale"), 3, nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale writer recreated a deleted key: %v", err)
	}
	// The object is still there (a tombstone), so the high-water mark survives.
	info, err := s.Head(ctx, key)
	if err != nil || info.Metadata[fence.MetaToken] != "4" {
		t.Fatalf("tombstone: %+v %v", info, err)
	}
	// Two tombstones never share an ETag (no ABA on If-Match).
	if err := fence.Delete(ctx, s, key, 4, nil); err != nil {
		t.Fatal(err)
	}
	if info2, _ := s.Head(ctx, key); info2.ETag == info.ETag {
		t.Fatalf("two tombstones share ETag %s", info.ETag)
	}
}

// A caller's mistake is ErrInvalidArgument, never ErrNotSupported (which
// says the store cannot), and nothing is written.
func TestCallerMistakesAreInvalidArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	d := docstore.New(s, nil)
	reserved := &fence.Options{Metadata: map[string]string{"Cairn-Fence-Extra": "1"}}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Put with a negative token", func() error { _, err := fence.PutBytes(ctx, s, "k", []byte("x"), -1, nil); return err }},
		{"Delete with a negative token", func() error { return fence.Delete(ctx, s, "k", -1, nil) }},
		{"Put with reserved metadata", func() error { _, err := fence.PutBytes(ctx, s, "k", []byte("x"), 1, reserved); return err }},
		{"PutKeepingMark with reserved metadata", func() error {
			_, err := fence.PutKeepingMark(ctx, s, "k", strings.NewReader("x"), reserved)
			return err
		}},
		{"Update with a negative token", func() error {
			_, _, err := fence.Update(ctx, d, "d.json", -1, func(*int, fence.DocMeta) error { return nil })
			return err
		}},
		{"UpdateKeepingMark of a value holding the reserved field", func() error {
			_, _, err := fence.UpdateKeepingMark(ctx, d, "d.json", func(v *map[string]any, _ fence.DocMeta) error {
				*v = map[string]any{fence.DocField: 1}
				return nil
			})
			return err
		}},
		{"CheckValue of a value holding the reserved field", func() error { return fence.CheckValue("d.json", []byte(`{"cairn_fence":1}`)) }},
		{"SQLExec with a negative token", func() error { return fence.SQLExec(ctx, nil, "UPDATE t SET v = 1", "k", -1) }},
		{"SQLUpsert with a name that is not an identifier", func() error {
			_, err := fence.SQLUpsert(fence.Postgres, "t; DROP TABLE t", "k", "fence_token", "v")
			return err
		}},
	} {
		err := tc.call()
		if !errors.Is(err, fence.ErrInvalidArgument) || errors.Is(err, objstore.ErrNotSupported) {
			t.Errorf("%s: %v, want ErrInvalidArgument (and not ErrNotSupported)", tc.name, err)
		}
	}
	if _, _, err := s.GetBytes(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("an object was written: %v", err)
	}
	if _, _, err := d.LoadBytes(ctx, "d.json"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("a document was written: %v", err)
	}
}

// A store that accepts conditional headers and ignores them cannot fence:
// refused before any write.
func TestRefusedWithoutConditions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("")
	s := objstore.New(faulty.New(inner, &faulty.Options{IgnoreConditions: true}), &objstore.Options{ProbeTTL: -1})
	cannot := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, objstore.ErrNotSupported) || errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("%s on a store that ignores conditions: %v, want ErrNotSupported (the store cannot), not ErrInvalidArgument", what, err)
		}
	}
	_, err := fence.PutBytes(ctx, s, "k", []byte("x"), 1, nil)
	cannot("Put", err)
	cannot("Delete", fence.Delete(ctx, s, "k", 1, nil))
	_, _, err = fence.Update(ctx, docstore.New(s, &docstore.Options{LastWriterWins: true}), "d", 1, func(*int, fence.DocMeta) error { return nil })
	cannot("Update", err)
	if _, _, err := objstore.New(inner, nil).GetBytes(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("something was written: %v", err)
	}
}

// recorder sits under the fault injector and logs every write that reached
// the store, in the order the store applied them (late ones included).
type recorder struct {
	objstore.Backend
	mu     sync.Mutex
	landed []landing
}

type landing struct {
	body    string
	token   string
	deleted bool
}

func (r *recorder) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return objstore.Info{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	info, err := r.Backend.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
	if err == nil {
		_, del := opts.Metadata[fence.MetaDeleted]
		r.landed = append(r.landed, landing{string(data), opts.Metadata[fence.MetaToken], del})
	}
	return info, err
}

type outcome struct {
	body  string
	token int64
	err   error
}

// Under lost requests, lost responses, requests that land late and (with
// quirks) 409s and 404s, writers with interleaved, sometimes stale tokens
// race for one key. What reached the store is checked write by write: the
// tokens that landed never go down, a refused write never landed, a
// successful one landed exactly once, a failed one (not ambiguous) never,
// and the final object carries the highest token that landed.
func TestFencedUnderFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		quirks faulty.Quirks
	}{
		{"minio-like", faulty.Quirks{}},
		{"aws-like", faulty.Quirks{MissingIfMatchNotFound: true, ConflictRate: 0.1}},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", tc.name, seed), func(t *testing.T) {
				t.Parallel()
				runFaulty(t, seed, tc.quirks)
			})
		}
	}
}

func runFaulty(t *testing.T, seed uint64, q faulty.Quirks) {
	ctx := context.Background()
	rec := &recorder{Backend: mem.OpenBackend("")}
	fb := faulty.New(rec, &faulty.Options{Seed: seed, FailRate: 0.03, LostRequestRate: 0.05, LostResponseRate: 0.08,
		LateApplyRate: 0.15, LateJitter: 5 * time.Millisecond, Jitter: 300 * time.Microsecond, Quirks: q})
	s := objstore.New(fb, nil)
	const key = "out/fenced"
	var lease atomic.Int64 // the current holder's token, as a lock would hand out
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range 25 {
				tok := lease.Load()
				if rnd.IntN(3) == 0 {
					tok = lease.Add(1) // a takeover
				}
				if rnd.IntN(4) == 0 { // a holder that stalled before writing
					time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
				}
				body := fmt.Sprintf("w%d-i%d-t%d", w, i, tok)
				var err error
				switch rnd.IntN(8) {
				case 0:
					err = fence.Delete(ctx, s, key, tok, nil)
					body = "" // tombstones: checked by token order only
				case 1: // a writer without a token: carries the mark forward
					body = fmt.Sprintf("w%d-i%d-keep", w, i)
					_, err = fence.PutKeepingMark(ctx, s, key, strings.NewReader(body), nil)
				default:
					_, err = fence.PutBytes(ctx, s, key, []byte(body), tok, nil)
				}
				mu.Lock()
				outs = append(outs, outcome{body, tok, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fb.Wait() // every late request has landed or been refused

	rec.mu.Lock()
	defer rec.mu.Unlock()
	count := map[string]int{}
	var last int64 = -1
	for i, l := range rec.landed {
		var tok int64 = -1 // a write without a token on a key without a mark
		if _, err := fmt.Sscan(l.token, &tok); l.token != "" && err != nil {
			t.Fatalf("landing %d carries token %q", i, l.token)
		}
		if tok < last {
			t.Fatalf("landing %d (%q) carries token %d after token %d had landed: a lower token overwrote a higher one", i, l.body, tok, last)
		}
		last = tok
		if !l.deleted {
			count[l.body]++
		}
	}
	var ok, stale, ambiguous, failed int
	for _, o := range outs {
		switch {
		case o.err == nil:
			ok++
		case errors.Is(o.err, fence.ErrStale):
			stale++
		case errors.Is(o.err, objstore.ErrAmbiguous):
			ambiguous++
		default:
			failed++
		}
		if o.body == "" {
			continue
		}
		n := count[o.body]
		switch {
		case o.err == nil && n != 1:
			t.Errorf("write %s succeeded but landed %d times", o.body, n)
		case errors.Is(o.err, fence.ErrStale) && n != 0:
			t.Errorf("write %s was refused as stale but landed: %v", o.body, o.err)
		case errors.Is(o.err, objstore.ErrAmbiguous) && n > 1:
			t.Errorf("ambiguous write %s landed %d times", o.body, n)
		case o.err != nil && !errors.Is(o.err, fence.ErrStale) && !errors.Is(o.err, objstore.ErrAmbiguous) && n != 0:
			t.Errorf("write %s failed (%v) but landed", o.body, o.err)
		}
	}
	t.Logf("%d writes: %d ok, %d stale, %d ambiguous, %d failed; %d landed; faults %+v", len(outs), ok, stale, ambiguous, failed, len(rec.landed), fb.Stats())
	if ok == 0 || stale == 0 {
		t.Fatalf("the test exercised too little: %d ok, %d stale", ok, stale)
	}
	info, err := objstore.New(rec.Backend, nil).Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := fence.TokenOf(info); tok != last {
		t.Fatalf("final object carries token %d, the highest landed is %d", tok, last)
	}
}

// Documents: concurrent fenced updates under the same faults append to a log
// in the document; the log's tokens never go down, a refused update is not in
// it, a successful one is in it exactly once.
func TestUpdateUnderFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fb := faulty.New(mem.OpenBackend(""), &faulty.Options{Seed: 7, FailRate: 0.03, LostRequestRate: 0.05, LostResponseRate: 0.08,
		LateApplyRate: 0.15, LateJitter: 5 * time.Millisecond, Jitter: 300 * time.Microsecond})
	d := docstore.New(objstore.New(fb, nil), &docstore.Options{MaxAttempts: 50})
	type entry struct {
		ID    string
		Token int64
	}
	var lease atomic.Int64
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	for w := range 5 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(9, uint64(w)))
			for i := range 15 {
				tok := lease.Load()
				if rnd.IntN(3) == 0 {
					tok = lease.Add(1)
				} else if rnd.IntN(3) == 0 {
					tok = max(0, tok-1-int64(rnd.IntN(2))) // a holder whose lease was taken over
				}
				id := fmt.Sprintf("w%d-i%d", w, i)
				var err error
				if rnd.IntN(6) == 0 { // a writer without a token: logs the mark it keeps
					_, _, err = fence.UpdateKeepingMark(ctx, d, "state.json", func(log *[]entry, m fence.DocMeta) error {
						*log = append(*log, entry{id, m.Token})
						return nil
					})
				} else {
					_, _, err = fence.Update(ctx, d, "state.json", tok, func(log *[]entry, m fence.DocMeta) error {
						if tok < m.Token {
							return fmt.Errorf("fn called with a recorded token %d above ours %d", m.Token, tok)
						}
						*log = append(*log, entry{id, tok})
						return nil
					})
				}
				mu.Lock()
				outs = append(outs, outcome{id, tok, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fb.Wait()
	log, m, err := fence.Load[[]entry](ctx, docstore.New(objstore.New(fb, nil), nil), "state.json")
	for err != nil && !errors.Is(err, objstore.ErrNotFound) { // injected read faults
		log, m, err = fence.Load[[]entry](ctx, docstore.New(objstore.New(fb, nil), nil), "state.json")
	}
	count := map[string]int{}
	var last int64 = -1
	for _, e := range log {
		if e.Token < last {
			t.Fatalf("log entry %s has token %d after %d", e.ID, e.Token, last)
		}
		last = e.Token
		count[e.ID]++
	}
	if m.Token != last {
		t.Fatalf("document records token %d, its last update was token %d", m.Token, last)
	}
	var ok, stale int
	for _, o := range outs {
		n := count[o.body]
		switch {
		case o.err == nil:
			ok++
			if n != 1 {
				t.Errorf("update %s succeeded, applied %d times", o.body, n)
			}
		case errors.Is(o.err, fence.ErrStale):
			stale++
			if n != 0 {
				t.Errorf("update %s refused as stale, but applied", o.body)
			}
		case errors.Is(o.err, objstore.ErrAmbiguous):
			if n > 1 {
				t.Errorf("ambiguous update %s applied %d times", o.body, n)
			}
		default:
			if n != 0 {
				t.Errorf("update %s failed (%v) but was applied", o.body, o.err)
			}
		}
	}
	t.Logf("%d updates: %d ok, %d stale; log of %d", len(outs), ok, stale, len(log))
	if ok == 0 || stale == 0 {
		t.Fatalf("the test exercised too little: %d ok, %d stale", ok, stale)
	}
}

func TestUpdateRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(mem.Open(), nil)
	// A document written without fencing is adopted as the value.
	if _, err := docstore.Typed[map[string]int](d).Create(ctx, "d.json", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	v, m, err := fence.Update(ctx, d, "d.json", 3, func(v *map[string]int, m fence.DocMeta) error {
		if m.Token != -1 || (*v)["n"] != 1 {
			return fmt.Errorf("saw %v token %d", *v, m.Token)
		}
		(*v)["n"]++
		return nil
	})
	if err != nil || v["n"] != 2 || m.Token != 3 {
		t.Fatalf("first fenced update: %v %+v %v", v, m, err)
	}
	if _, _, err := fence.Update(ctx, d, "d.json", 3, func(v *map[string]int, _ fence.DocMeta) error { (*v)["n"]++; return nil }); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	called := false
	_, _, err = fence.Update(ctx, d, "d.json", 2, func(*map[string]int, fence.DocMeta) error { called = true; return nil })
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Token != 2 || se.Highest != 3 || called {
		t.Fatalf("token 2 after 3: %v (fn called: %v), want StaleError 2 < 3 without calling fn", err, called)
	}
	raw, _, _ := d.LoadBytes(ctx, "d.json")
	if string(raw) != `{"cairn_fence":3,"value":{"n":3}}` {
		t.Fatalf("stored value %s", raw)
	}
}
