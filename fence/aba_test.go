package fence_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// racer lets a holder with token 9 write body just before the next PUT sent
// through it, that is between a fenced write's HEAD and its conditional PUT.
type racer struct {
	objstore.Backend
	mu   sync.Mutex
	body string // "" once the race has run, or before it is armed
}

func (r *racer) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	r.mu.Lock()
	b := r.body
	r.body = ""
	r.mu.Unlock()
	if b != "" {
		if _, err := fence.PutBytes(ctx, objstore.New(r.Backend, nil), key, []byte(b), 9, nil); err != nil {
			return objstore.Info{}, err
		}
	}
	return r.Backend.Put(ctx, key, body, size, opts)
}

// The documented limit (# Limits): If-Match compares ETags, an ETag is the
// MD5 of the bytes, so a write judged on one version replaces another with
// the same bytes. A token-6 holder wrote X; a write judged on that version
// (mark 6) is overtaken by token 9 writing X again; its If-Match still holds,
// it lands, and the mark it records is lower than 9. With different bytes
// the same race is caught: the write re-reads and judges again.
func TestIdenticalBytesAreIndistinguishable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		racerBody string
		write     func(s *objstore.Store) error
		wantMark  int64 // after the race
	}{
		{"PutKeepingMark, identical bytes", "X", func(s *objstore.Store) error {
			_, err := fence.PutKeepingMark(ctx, s, "k", strings.NewReader("Z"), nil)
			return err
		}, 6},
		{"PutKeepingMark, other bytes", "Y", func(s *objstore.Store) error {
			_, err := fence.PutKeepingMark(ctx, s, "k", strings.NewReader("Z"), nil)
			return err
		}, 9},
		{"Put token 7, identical bytes", "X", func(s *objstore.Store) error {
			_, err := fence.PutBytes(ctx, s, "k", []byte("Z"), 7, nil)
			return err
		}, 7},
		{"Put token 7, other bytes", "Y", func(s *objstore.Store) error {
			_, err := fence.PutBytes(ctx, s, "k", []byte("Z"), 7, nil)
			if !errors.Is(err, fence.ErrStale) {
				t.Errorf("token 7 after token 9 with other bytes: %v, want ErrStale", err)
			}
			return nil
		}, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &racer{Backend: mem.OpenBackend("aba")}
			s := objstore.New(r, nil)
			if _, err := fence.PutBytes(ctx, s, "k", []byte("X"), 6, nil); err != nil {
				t.Fatal(err)
			}
			r.mu.Lock()
			r.body = tc.racerBody
			r.mu.Unlock()
			if err := tc.write(s); err != nil {
				t.Fatal(err)
			}
			if tok, err := fence.Token(ctx, s, "k"); err != nil || tok != tc.wantMark {
				t.Fatalf("mark after the race: %d %v, want %d", tok, err, tc.wantMark)
			}
			// Token 8 comes after token 9 wrote: refused only if the mark is 9.
			_, err := fence.PutBytes(ctx, s, "k", []byte("late"), 8, nil)
			if stale := errors.Is(err, fence.ErrStale); stale != (tc.wantMark > 8) {
				t.Fatalf("token 8 after token 9: %v", err)
			}
		})
	}
}
