package audit_test

import (
	"context"
	"testing"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// TestSkip: objects Options.Skip reports (cairn serve: cairn's own objects)
// are listed but never resubmitted; the others are.
func TestSkip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	for _, k := range []string{"cairn-probe/verdict.json", "cairn-locks/tree/x", "cairn-probe-x/y", "data/cairn-locks/z"} {
		if _, err := s.PutBytes(ctx, k, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	l := ledgers["sqlite"](t)
	own := func(k string) bool { _, ok := cairn.OwnKey(k); return ok }
	rep, err := audit.Run(ctx, s, l, "b", &audit.Options{Grace: 0, Skip: own})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Listed != 4 || rep.Resubmitted != 2 || rep.Counts[audit.Missing] != 2 {
		t.Fatalf("report %+v, want 4 listed and the 2 user keys resubmitted", rep)
	}
	for _, k := range []string{"cairn-probe/verdict.json", "cairn-locks/tree/x"} {
		if rs, err := l.Get(ctx, "b", k); err == nil {
			t.Errorf("%s resubmitted: %+v", k, rs)
		}
	}
}
