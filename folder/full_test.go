package folder_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// An operation stopped by a failed request (here the disk filling up after
// a few copies) says what it left, as an interrupted one does: how many
// objects were copied, and that the journal will finish it; with space
// freed, Recover does. Stopped before its intent was written, it says that
// nothing was changed.
func TestStoppedByFullDisk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fullAfter int64 // writes of dst/ objects let through
		journaled bool
	}{
		{"mid-copy", 4, true},
		{"before the intent", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inner := mem.OpenBackend("")
			var full atomic.Bool
			var dstWrites atomic.Int64
			fb := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
				if tc.fullAfter < 0 {
					return map[bool]faulty.Fault{true: faulty.Full, false: faulty.None}[full.Load()], 0
				}
				if strings.HasPrefix(key, "dst/") && (op == faulty.OpCopy || op == faulty.OpPut) && dstWrites.Add(1) > tc.fullAfter {
					full.Store(true)
				}
				if full.Load() {
					return faulty.Full, 0
				}
				return faulty.None, 0
			}})
			s := objstore.New(fb, nil)
			want := fill(t, s, "src/", 3)
			if tc.fullAfter < 0 {
				full.Store(true)
			}
			locks := folder.LocalLocker{L: &pathlock.Locker{}}
			_, err := folder.New(s, &folder.Options{Locker: locks, Concurrency: 1, ChunkSize: 5}).Rename(context.Background(), "src/", "dst/", false)
			var ie *folder.InterruptedError
			if !errors.As(err, &ie) || !ie.Failed || !errors.Is(err, objstore.ErrUnwritable) || errors.Is(err, context.Canceled) {
				t.Fatalf("rename on a filling disk: %v, want a failed *folder.InterruptedError wrapping ErrUnwritable", err)
			}
			if !tc.journaled {
				if ie.Journaled() || ie.State() != "nothing was changed" || !strings.Contains(err.Error(), "run it again once the cause is fixed") {
					t.Fatalf("stopped before the intent: %v (%+v), want nothing changed", err, ie)
				}
				noJournal(t, s)
				if got := contents(t, s, "src/"); !equal(got, want) {
					t.Fatal("the source changed")
				}
				return
			}
			if !ie.Journaled() || ie.Phase != "copy" || ie.Objects != int64(len(want)) || ie.Copied != tc.fullAfter {
				t.Fatalf("stopped: %+v, want journaled, copy phase, %d of %d copied", ie, tc.fullAfter, len(want))
			}
			msg := err.Error()
			for _, says := range []string{"stopped", "is full: free space and retry", fmt.Sprintf("4 of %d objects copied to dst/", len(want)), "journaled", "will be finished by Recover"} {
				if !strings.Contains(msg, says) {
					t.Errorf("%q does not say %q", msg, says)
				}
			}
			full.Store(false)
			dstWrites.Store(-1 << 40)
			if rep, err := folder.New(s, &folder.Options{Locker: locks}).Recover(context.Background()); err != nil || len(rep.Finished) != 1 {
				t.Fatalf("recover after space was freed: %+v %v", rep, err)
			}
			if got := contents(t, s, "dst/"); !equal(got, want) {
				t.Fatalf("dst holds %d objects after the roll-forward, want %d", len(got), len(want))
			}
			if got := contents(t, s, "src/"); len(got) != 0 {
				t.Fatalf("src holds %d objects after the roll-forward", len(got))
			}
			noJournal(t, s)
		})
	}
}
