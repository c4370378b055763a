package fence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// The first PUT of a call gets each fault; Put must settle it: a write that
// landed is a success (not written twice), a lost or late one is sent again
// on the same condition, so at most one lands, and the object ends with the
// call's token and body.
func TestPutSettlesAmbiguousWrites(t *testing.T) {
	t.Parallel()
	for _, f := range []faulty.Fault{faulty.LostResponse, faulty.LostRequest, faulty.LateApply} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rec := &recorder{Backend: mem.OpenBackend("")}
			var puts atomic.Int64
			fb := faulty.New(rec, &faulty.Options{LateDelay: time.Millisecond, Rule: func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
				if op == faulty.OpPut && puts.Add(1) == 2 { // the first put after setup
					return f, 0
				}
				return faulty.None, 0
			}})
			s := objstore.New(fb, nil)
			if _, err := fence.PutBytes(ctx, s, "k", []byte("v1"), 1, nil); err != nil {
				t.Fatal(err)
			}
			_, err := fence.PutBytes(ctx, s, "k", []byte("v2"), 2, nil)
			fb.Wait()
			n := 0
			for _, l := range rec.landed {
				if l.body == "v2" {
					n++
				}
			}
			switch {
			case err == nil && n != 1:
				t.Fatalf("Put succeeded and its write landed %d times", n)
			case errors.Is(err, objstore.ErrAmbiguous) && n > 1:
				t.Fatalf("ambiguous Put landed %d times", n)
			case err != nil && !errors.Is(err, objstore.ErrAmbiguous):
				t.Fatalf("Put: %v", err)
			}
			if f != faulty.LateApply && err != nil {
				t.Fatalf("a %v with nothing else writing must be settled, got %v", f, err)
			}
			if _, err := fence.PutBytes(ctx, s, "k", []byte("v1 again"), 1, nil); n == 1 && !errors.Is(err, fence.ErrStale) {
				t.Fatalf("token 1 after token 2 landed: %v, want ErrStale", err)
			}
		})
	}
}
