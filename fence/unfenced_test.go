package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// stores runs f on the memory store and on real MinIO (user metadata there
// goes through S3's x-amz-meta-* headers and HEAD).
func stores(t *testing.T, f func(t *testing.T, s *objstore.Store)) {
	t.Run("mem", func(t *testing.T) {
		t.Parallel()
		f(t, mem.Open())
	})
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		b, _ := testenv.NewBucket(t, testenv.S3(t))
		f(t, objstore.New(b, nil))
	})
}

// The testers' sequence for objects, through the library: token 6 writes, a
// writer without a token writes, token 2 comes late. The writer without a
// token either refuses (CheckUnfenced on what it read) or keeps the mark
// (PutKeepingMark); either way token 2 is refused.
func TestWriterWithoutATokenKeepsTheMark(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *objstore.Store) {
		ctx := context.Background()
		const key = "out/report.csv"
		if _, err := fence.PutBytes(ctx, s, key, []byte("A"), 6, nil); err != nil {
			t.Fatal(err)
		}
		info, err := s.Head(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		err = fence.CheckUnfenced(key, info)
		var fe *fence.FencedError
		if !errors.As(err, &fe) || !errors.Is(err, fence.ErrFenced) || fe.Highest != 6 || fe.Deleted || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("CheckUnfenced of a token-6 object: %v, want a FencedError naming 6", err)
		}
		if errors.Is(err, fence.ErrStale) || errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Fatalf("ErrFenced must wrap nothing else: %v", err)
		}

		if _, err := fence.PutKeepingMark(ctx, s, key, strings.NewReader("B"), &fence.Options{ContentType: "text/csv"}); err != nil {
			t.Fatalf("PutKeepingMark: %v", err)
		}
		body, m, err := fence.Get(ctx, s, key)
		if err != nil || string(body) != "B" || m.Token != 6 || m.ContentType != "text/csv" {
			t.Fatalf("after PutKeepingMark: %q token %d %q %v, want B with token 6", body, m.Token, m.ContentType, err)
		}
		if _, err := fence.PutBytes(ctx, s, key, []byte("C"), 2, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 2 after token 6 and a write without a token: %v, want ErrStale", err)
		}
		if _, err := fence.PutBytes(ctx, s, key, []byte("D"), 6, nil); err != nil {
			t.Fatalf("token 6 again: %v", err)
		}

		// A tombstone's mark is carried forward too: the key comes back
		// with it, and a stale holder still cannot write.
		if err := fence.Delete(ctx, s, key, 7, nil); err != nil {
			t.Fatal(err)
		}
		info, _ = s.Head(ctx, key)
		if err := fence.CheckUnfenced(key, info); !errors.As(err, &fe) || !fe.Deleted || fe.Highest != 7 {
			t.Fatalf("CheckUnfenced of a tombstone: %v", err)
		}
		if _, err := fence.PutKeepingMark(ctx, s, key, strings.NewReader("E"), nil); err != nil {
			t.Fatal(err)
		}
		if body, m, err := fence.Get(ctx, s, key); err != nil || string(body) != "E" || m.Token != 7 || m.Deleted {
			t.Fatalf("PutKeepingMark over a tombstone: %q %+v %v, want E with token 7", body, m, err)
		}
		if _, err := fence.PutBytes(ctx, s, key, []byte("F"), 6, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 6 after a token-7 delete and a write without a token: %v, want ErrStale", err)
		}

		// A key without a mark stays without one; a missing key is created.
		for _, k := range []string{"plain/existing", "plain/missing"} {
			if k == "plain/existing" {
				if _, err := s.PutBytes(ctx, k, []byte("x"), nil); err != nil {
					t.Fatal(err)
				}
			}
			info, err := s.Head(ctx, k)
			if err == nil {
				if err := fence.CheckUnfenced(k, info); err != nil {
					t.Fatalf("CheckUnfenced of a plain object: %v", err)
				}
			}
			if _, err := fence.PutKeepingMark(ctx, s, k, strings.NewReader("y"), nil); err != nil {
				t.Fatal(err)
			}
			if tok, _ := fence.Token(ctx, s, k); tok != -1 {
				t.Fatalf("%s: PutKeepingMark gave an unfenced key token %d", k, tok)
			}
		}
		if _, err := fence.PutKeepingMark(ctx, s, key, strings.NewReader("x"), &fence.Options{Metadata: map[string]string{"cairn-fence": "1"}}); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("metadata forging the mark: %v, want ErrInvalidArgument", err)
		}
	})
}

// The testers' sequence for documents, through the library: an update
// without a token changes the value and keeps the mark; it can neither
// lower the mark nor land beside the wrapper.
func TestUpdateKeepingMark(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *objstore.Store) {
		ctx := context.Background()
		d := docstore.New(s, nil)
		type counter map[string]int
		set := func(k string, n int) func(*counter, fence.DocMeta) error {
			return func(v *counter, _ fence.DocMeta) error {
				if *v == nil {
					*v = counter{}
				}
				(*v)[k] = n
				return nil
			}
		}
		if _, _, err := fence.Update(ctx, d, "state.json", 5, set("count", 2)); err != nil {
			t.Fatal(err)
		}
		var seen fence.DocMeta
		v, m, err := fence.UpdateKeepingMark(ctx, d, "state.json", func(v *counter, m fence.DocMeta) error {
			seen = m
			(*v)["count"] = 9
			return nil
		})
		if err != nil || v["count"] != 9 || m.Token != 5 || seen.Token != 5 {
			t.Fatalf("UpdateKeepingMark: %v %+v (fn saw token %d) %v, want count 9 with token 5", v, m, seen.Token, err)
		}
		if raw, _, _ := d.LoadBytes(ctx, "state.json"); string(raw) != `{"cairn_fence":5,"value":{"count":9}}` {
			t.Fatalf("stored %s", raw)
		}
		// A field named like the mark inside the value is the value's.
		if _, _, err := fence.UpdateKeepingMark(ctx, d, "state.json", set(fence.DocField, 1)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fence.Update(ctx, d, "state.json", 2, set("count", 3)); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 2 after token 5 and updates without a token: %v, want ErrStale", err)
		}
		got, m, err := fence.Load[counter](ctx, d, "state.json")
		if err != nil || got["count"] != 9 || got[fence.DocField] != 1 || m.Token != 5 {
			t.Fatalf("Load: %v token %d %v", got, m.Token, err)
		}

		// fn may refuse a fenced document.
		_, _, err = fence.UpdateKeepingMark(ctx, d, "state.json", func(_ *counter, m fence.DocMeta) error {
			return &fence.FencedError{Key: "state.json", Highest: m.Token}
		})
		if !errors.Is(err, fence.ErrFenced) {
			t.Fatalf("fn's refusal: %v", err)
		}

		// A document without a mark stays without one, and may not gain a
		// top-level cairn_fence that would read as a mark.
		if _, _, err := fence.UpdateKeepingMark(ctx, d, "plain.json", set("n", 1)); err != nil {
			t.Fatal(err)
		}
		if raw, _, _ := d.LoadBytes(ctx, "plain.json"); string(raw) != `{"n":1}` {
			t.Fatalf("plain document stored %s", raw)
		}
		if _, _, err := fence.UpdateKeepingMark(ctx, d, "plain.json", set(fence.DocField, 1)); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("a plain value gaining cairn_fence: %v, want ErrInvalidArgument", err)
		}
		if _, m, err := fence.Load[json.RawMessage](ctx, d, "plain.json"); err != nil || m.Token != -1 {
			t.Fatalf("plain document after the refusal: token %d %v", m.Token, err)
		}
	})
}

// A value stored without a mark may not hold cairn_fence at its top level
// whatever it holds there (-1, null, a string): stored bare, it would read
// as a wrapper whose "value" is missing, and the next fenced update would
// store that nothing, losing the value's other fields. A document someone
// else stored that way is refused with an error, never read as mark 0 or as
// no mark.
func TestReservedFieldWhateverItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(mem.Open(), nil)
	for i, field := range []any{-1, nil, "x", 1.5, 0} {
		key := fmt.Sprintf("p%d.json", i)
		_, _, err := fence.UpdateKeepingMark(ctx, d, key, func(v *map[string]any, _ fence.DocMeta) error {
			*v = map[string]any{fence.DocField: field, "orders": 42}
			return nil
		})
		if !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("cairn_fence %v in a value without a mark: %v, want ErrInvalidArgument", field, err)
		}
		if _, _, err := d.LoadBytes(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("cairn_fence %v: something was stored (%v)", field, err)
		}
		if err := fence.CheckValue(key, []byte(fmt.Sprintf(`{"orders":1,%q:%s}`, fence.DocField, must(json.Marshal(field))))); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("CheckValue with cairn_fence %v: %v", field, err)
		}
	}
	for _, stored := range []string{`{"cairn_fence":null,"orders":42}`, `{"cairn_fence":-1,"orders":42}`, `{"cairn_fence":"7","orders":42}`} {
		if _, err := docstore.Typed[json.RawMessage](d).Create(ctx, "foreign.json", json.RawMessage(stored)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fence.Load[map[string]any](ctx, d, "foreign.json"); err == nil || !strings.Contains(err.Error(), "not a fencing token") {
			t.Errorf("Load of %s: %v, want an error naming the field", stored, err)
		}
		for _, write := range []func() error{
			func() error {
				_, _, err := fence.Update(ctx, d, "foreign.json", 3, func(*map[string]any, fence.DocMeta) error { return nil })
				return err
			},
			func() error {
				_, _, err := fence.UpdateKeepingMark(ctx, d, "foreign.json", func(*map[string]any, fence.DocMeta) error { return nil })
				return err
			},
		} {
			if err := write(); err == nil {
				t.Errorf("a write over %s succeeded", stored)
			}
		}
		if raw, _, _ := d.LoadBytes(ctx, "foreign.json"); string(raw) != stored {
			t.Errorf("%s became %s", stored, raw)
		}
		if err := d.Objects().Delete(ctx, "foreign.json", objstore.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A document's mark is in its body, an object's in its metadata: each kind
// of write is judged by the mark of the other kind too, and carries it on.
func TestMarksAcrossObjectsAndDocuments(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *objstore.Store) {
		ctx := context.Background()
		d := docstore.New(s, nil)
		set := func(v *map[string]int, _ fence.DocMeta) error { *v = map[string]int{"n": 1}; return nil }
		// Object writers over a fenced document.
		if _, _, err := fence.Update(ctx, d, "doc.json", 5, set); err != nil {
			t.Fatal(err)
		}
		info, err := s.Head(ctx, "doc.json")
		if err != nil {
			t.Fatal(err)
		}
		var fe *fence.FencedError
		if err := fence.CheckUnfencedAt(ctx, s, "doc.json", info); !errors.As(err, &fe) || !fe.Document || fe.Highest != 5 {
			t.Fatalf("CheckUnfencedAt of a fenced document: %v", err)
		}
		if err := fence.CheckUnfenced("doc.json", info); err != nil {
			t.Fatalf("CheckUnfenced reads metadata only: %v", err)
		}
		if _, err := fence.PutBytes(ctx, s, "doc.json", []byte("x"), 3, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Put token 3 over a document fenced by 5: %v", err)
		}
		if err := fence.Delete(ctx, s, "doc.json", 4, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Delete token 4 of a document fenced by 5: %v", err)
		}
		if _, err := fence.PutKeepingMark(ctx, s, "doc.json", strings.NewReader(`{"n":2}`), &fence.Options{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		if tok, _ := fence.Token(ctx, s, "doc.json"); tok != 5 {
			t.Fatalf("PutKeepingMark over a document fenced by 5: mark %d", tok)
		}
		// Document writers over a fenced object.
		if _, err := fence.PutBytes(ctx, s, "obj.json", []byte(`{"n":0}`), 6, &fence.Options{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fence.Update(ctx, d, "obj.json", 4, set); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Update token 4 over an object fenced by 6: %v", err)
		}
		if _, m, err := fence.UpdateKeepingMark(ctx, d, "obj.json", set); err != nil || m.Token != 6 {
			t.Fatalf("UpdateKeepingMark over an object fenced by 6: token %d %v", m.Token, err)
		}
		if _, _, err := fence.Update(ctx, d, "obj.json", 4, set); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Update token 4 after UpdateKeepingMark: %v", err)
		}
	})
}
