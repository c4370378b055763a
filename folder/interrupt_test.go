package folder_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// An interrupted rename says what it left and what finishes it; run again
// after a roll-forward (its own, or Recover's elsewhere) it reports the
// rename done instead of "source folder is empty or missing" — judged by
// the roll-forward's tombstone and the folders, not by emptiness alone.
func TestInterruptedThenAlreadyRenamed(t *testing.T) {
	for _, elsewhere := range []bool{false, true} {
		t.Run(fmt.Sprint("elsewhere=", elsewhere), func(t *testing.T) {
			t.Parallel()
			s := mem.Open()
			want := fill(t, s, "src/", 5) // 30 objects
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var copies atomic.Int64
			locks := folder.LocalLocker{L: &pathlock.Locker{}}
			ops := folder.New(s, &folder.Options{Locker: locks, Concurrency: 1, ChunkSize: 7, Progress: func(p folder.Progress) {
				if p.Phase == "copy" && copies.Add(1) == 9 {
					cancel() // Ctrl-C
				}
			}})
			_, err := ops.Rename(ctx, "src/", "dst/", false)
			var ie *folder.InterruptedError
			if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted rename: %v, want a *folder.InterruptedError wrapping context.Canceled", err)
			}
			if !ie.Journaled() || ie.Phase != "copy" || ie.Objects != int64(len(want)) || ie.Copied < 9 || ie.Copied >= ie.Objects {
				t.Fatalf("interruption: %+v, want journaled, copy phase, 9+ of %d copied", ie, len(want))
			}
			if st := ie.State(); !strings.Contains(st, fmt.Sprintf("%d of %d objects copied to dst/", ie.Copied, len(want))) {
				t.Fatalf("state %q does not say how many objects were copied", st)
			}
			p, err := folder.PendingOps(context.Background(), s, "dst/")
			if err != nil || len(p) != 1 || p[0].Op != "rename" || p[0].Phase != "copy" || p[0].Journal != ie.Journal {
				t.Fatalf("pending operations on dst/: %+v %v, want the interrupted rename", p, err)
			}
			if p, _ := folder.PendingOps(context.Background(), s, "elsewhere/"); len(p) != 0 {
				t.Fatalf("an unrelated folder has pending operations: %+v", p)
			}
			again := folder.New(s, &folder.Options{Locker: locks})
			if elsewhere {
				if rep, err := again.Recover(context.Background()); err != nil || len(rep.Finished) != 1 {
					t.Fatalf("recover: %+v %v", rep, err)
				}
			}
			for range 2 { // and once more after that
				res, err := again.Rename(context.Background(), "src/", "dst/", false)
				if err != nil || !res.Already || res.Objects != int64(len(want)) {
					t.Fatalf("the same rename again: %+v %v, want success with Already", res, err)
				}
			}
			if got := contents(t, s, "dst/"); !equal(got, want) {
				t.Fatalf("dst holds %d objects, want %d", len(got), len(want))
			}
			if p, _ := folder.PendingOps(context.Background(), s, ""); len(p) != 0 {
				t.Fatalf("pending after the roll-forward: %+v", p)
			}
			noJournal(t, s)
			// Evidence, not emptiness: once dst no longer holds what the
			// rename left, the same rename is refused again.
			if err := s.Delete(context.Background(), "dst/0-a.txt", objstore.Condition{}); err != nil {
				t.Fatal(err)
			}
			if _, err := again.Rename(context.Background(), "src/", "dst/", false); !errors.Is(err, folder.ErrNotFound) {
				t.Fatalf("rename after dst changed: %v, want ErrNotFound", err)
			}
			// A different rename of the same source has no evidence.
			if _, err := again.Rename(context.Background(), "src/", "other/", false); !errors.Is(err, folder.ErrNotFound) {
				t.Fatalf("a different rename: %v, want ErrNotFound", err)
			}
		})
	}
}

// A rename that completed without interruption leaves no evidence: running
// it again is refused (the source is empty), as before.
func TestCompletedRenameAgainIsRefused(t *testing.T) {
	t.Parallel()
	s := mem.Open()
	fill(t, s, "src/", 1)
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}})
	if _, err := ops.Rename(context.Background(), "src/", "dst/", false); err != nil {
		t.Fatal(err)
	}
	if res, err := ops.Rename(context.Background(), "src/", "dst/", false); !errors.Is(err, folder.ErrNotFound) {
		t.Fatalf("again: %+v %v, want ErrNotFound", res, err)
	}
	noJournal(t, s)
}

// Interrupted while waiting for the lock, an operation changed nothing and
// says so.
func TestInterruptedBeforeIntent(t *testing.T) {
	t.Parallel()
	s := mem.Open()
	want := fill(t, s, "src/", 1)
	locks := folder.LocalLocker{L: &pathlock.Locker{}}
	h, err := locks.L.Acquire(context.Background(), pathlock.Request{Write: []string{"/dst"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = folder.New(s, &folder.Options{Locker: locks}).Rename(ctx, "src/", "dst/", false)
	var ie *folder.InterruptedError
	if !errors.As(err, &ie) || ie.Journaled() || ie.State() != "nothing was changed" {
		t.Fatalf("interrupted in the lock wait: %v (%+v)", err, ie)
	}
	if got := contents(t, s, "src/"); !equal(got, want) {
		t.Fatal("the source changed")
	}
	noJournal(t, s)
}

// A request that must wait for the tree lock is told so first, with the
// holder's process as its session recorded it.
func TestTreeLockerWaitingNamesHolder(t *testing.T) {
	t.Parallel()
	s := mem.Open()
	holder := treelock.New(s, &treelock.Options{TTL: 5 * time.Second})
	defer holder.Close()
	h, err := holder.Acquire(context.Background(), treelock.Request{Write: []string{"/data/src"}})
	if err != nil {
		t.Fatal(err)
	}
	waiter := treelock.New(s, &treelock.Options{TTL: 5 * time.Second, Poll: 5 * time.Millisecond})
	defer waiter.Close()
	waits := make(chan folder.Wait, 1)
	tl := folder.TreeLocker{M: waiter, Store: s, Waiting: func(w folder.Wait) { waits <- w }}
	got := make(chan error, 1)
	go func() {
		unlock, _, err := tl.Lock(context.Background(), nil, []string{"/data/src", "/data/dst"})
		if err == nil {
			unlock()
		}
		got <- err
	}()
	w := <-waits
	host, _ := os.Hostname()
	me := fmt.Sprintf("%s/%d", host, os.Getpid())
	found := false
	for _, hd := range w.Holders {
		found = found || hd.Path == "/data/src" && hd.Mode == "X" && hd.Who == me && !hd.Waiting
	}
	if !found {
		t.Fatalf("holders %+v do not name %s holding /data/src in X", w.Holders, me)
	}
	h.Release(context.Background())
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Uncontended: no call.
	unlock, _, err := tl.Lock(context.Background(), nil, []string{"/data/src"})
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	select {
	case w := <-waits:
		t.Fatalf("an uncontended lock reported a wait: %+v", w)
	default:
	}
}

// An interrupted delete run again after its roll-forward reports it done.
func TestInterruptedDeleteThenAlreadyDeleted(t *testing.T) {
	t.Parallel()
	s := mem.Open()
	fill(t, s, "old/", 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locks := folder.LocalLocker{L: &pathlock.Locker{}}
	var deletes atomic.Int64
	ops := folder.New(s, &folder.Options{Locker: locks, Concurrency: 1, ChunkSize: 7, Progress: func(p folder.Progress) {
		if p.Phase == "delete" && deletes.Add(1) == 1 {
			cancel()
		}
	}})
	_, err := ops.Delete(ctx, "old/")
	var ie *folder.InterruptedError
	if !errors.As(err, &ie) || ie.Phase != "delete" || !strings.Contains(ie.State(), "deleted from old/") {
		t.Fatalf("interrupted delete: %v", err)
	}
	res, err := folder.New(s, &folder.Options{Locker: locks}).Delete(context.Background(), "old/")
	if err != nil || !res.Already || res.Objects != 30 {
		t.Fatalf("the same delete again: %+v %v, want Already", res, err)
	}
	if holdsKeys(t, s, "old/") {
		t.Fatal("objects left under old/")
	}
}

func holdsKeys(t *testing.T, s *objstore.Store, prefix string) bool {
	infos, err := s.ListAll(context.Background(), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(infos) > 0
}

// landsThenCancels is a store whose copies land and whose nth copy into dst/
// then ends the run (Ctrl-C while the response is on its way): the copy
// landed, its caller saw only its context's end.
type landsThenCancels struct {
	*mem.Backend
	n      int64
	copies atomic.Int64
	cancel context.CancelFunc
}

func (b *landsThenCancels) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	info, err := b.Backend.Copy(ctx, src, dst, cond)
	if err == nil && strings.HasPrefix(dst, "dst/") && b.copies.Add(1) == b.n {
		b.cancel()
		return objstore.Info{}, ctx.Err()
	}
	return info, err
}

// An interrupted rename never says fewer objects were copied than landed
// (issue 38: "252 of 2000 copied" while 264 had): a copy under way when it
// stopped is counted as one that may have landed, and the count says "at
// least".
func TestInterruptedCountsCopiesUnderWay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &landsThenCancels{Backend: mem.OpenBackend(""), n: 5, cancel: cancel}
	s := objstore.New(b, nil)
	want := fill(t, s, "src/", 5)
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}, Concurrency: 1})
	_, err := ops.Rename(ctx, "src/", "dst/", false)
	var ie *folder.InterruptedError
	if !errors.As(err, &ie) || ie.Phase != "copy" {
		t.Fatalf("interrupted rename: %v, want an interruption in the copy phase", err)
	}
	landed := int64(len(contents(t, s, "dst/")))
	if landed != b.n {
		t.Fatalf("%d copies landed, want %d", landed, b.n)
	}
	if ie.Copied+ie.Unsure < landed {
		t.Fatalf("reported %d copied and %d under way, but %d landed", ie.Copied, ie.Unsure, landed)
	}
	st := ie.State()
	if ie.Copied < landed && !strings.Contains(st, fmt.Sprintf("at least %d of %d objects copied to dst/", ie.Copied, len(want))) {
		t.Fatalf("state %q claims an exact count below the %d copies that landed", st, landed)
	}
	if ie.Unsure < 1 || !strings.Contains(st, fmt.Sprintf("%d more copies were under way when it stopped and may have landed", ie.Unsure)) {
		t.Fatalf("state %q does not name the copy under way", st)
	}
	// The roll-forward finishes it.
	if rep, err := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}}).Recover(context.Background()); err != nil || len(rep.Finished) != 1 {
		t.Fatalf("recover: %+v %v", rep, err)
	}
	if got := contents(t, s, "dst/"); !equal(got, want) {
		t.Fatalf("dst holds %d objects after recover, want %d", len(got), len(want))
	}
	noJournal(t, s)
}
