package treelock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

const prefix = "cairn-locks/tree/"

func lockObjects(t *testing.T, s *objstore.Store) []string {
	t.Helper()
	infos, err := s.ListAll(context.Background(), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, in := range infos {
		keys = append(keys, strings.TrimPrefix(in.Key, prefix))
	}
	return keys
}

// op is one command's worth of locking, as `cairn fs` and `cairn lock tree`
// do it: a Manager of its own, one request, release, close.
func op(t *testing.T, s *objstore.Store, ttl time.Duration, r treelock.Request, path string) int64 {
	t.Helper()
	ctx := context.Background()
	m := treelock.New(s, &treelock.Options{TTL: ttl})
	defer m.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := m.Acquire(wctx, r)
	if err != nil {
		t.Fatalf("acquire %+v: %v", r, err)
	}
	defer h.Release(ctx)
	return h.Token(path)
}

// On MinIO, operations on ever new paths leave only the root's document
// behind (each left a session and a node per new path for ever before: 3
// objects an operation here), and the token of a path grows across the
// cleanups.
func TestCleanupBoundedMinIO(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	bk, _ := testenv.NewBucket(t, ep)
	s := objstore.New(bk, nil)
	var last int64
	for i := range 12 {
		tok := op(t, s, 5*time.Second, treelock.Request{Write: []string{fmt.Sprintf("/jobs/%d/part", i)}, Read: []string{"/ref"}}, "/ref")
		if tok <= last {
			t.Fatalf("operation %d: token of /ref %d after %d: went backwards across a cleanup", i, tok, last)
		}
		last = tok
		if keys := lockObjects(t, s); len(keys) > 1 {
			t.Fatalf("after operation %d, %d lock objects are left (want only the root's): %v", i, len(keys), keys)
		}
	}
	// Same in one long-lived Manager, requests in parallel.
	m := treelock.New(s, &treelock.Options{TTL: 5 * time.Second})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5 {
				h, err := m.Acquire(context.Background(), treelock.Request{Write: []string{fmt.Sprintf("/par/%d/%d", g, i)}})
				if err != nil {
					t.Error(err)
					return
				}
				h.Release(context.Background())
			}
		})
	}
	wg.Wait()
	m.Close()
	if keys := lockObjects(t, s); len(keys) > 1 {
		t.Fatalf("after parallel requests and Close, %d lock objects are left (want only the root's): %v", len(keys), keys)
	}
}

// A holder killed with its locks held (no release, no Close) leaves its
// session and nodes; a later process that only locks other paths (and so
// never watched the dead session for a TTL) removes them once the store's
// clock says the session expired beyond doubt. The path's token then grows
// past the killed holder's.
func TestKilledHolderCollectedMinIO(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	bk, _ := testenv.NewBucket(t, ep)
	s := objstore.New(bk, nil)
	ctx := context.Background()
	const ttl = time.Second
	k := treelock.New(s, &treelock.Options{TTL: ttl})
	h, err := k.Acquire(ctx, treelock.Request{Write: []string{"/killed/x"}})
	if err != nil {
		t.Fatal(err)
	}
	killed := h.Token("/killed/x")
	k.Crash()
	// Its three nodes, and its session unless that already expired (a TTL
	// of a second can pass before the Crash on a loaded machine: the renewer
	// then deletes its own session, and the nodes stay for others to sweep).
	if keys := lockObjects(t, s); len(keys) < 3 {
		t.Fatalf("the killed holder left %v, want its three nodes (and its session)", keys)
	}
	deadline := time.Now().Add(2 * time.Minute) // a bound for a failure, not a timing assertion
	for i := 0; ; i++ {
		op(t, s, ttl, treelock.Request{Write: []string{fmt.Sprintf("/other/%d", i)}}, "/")
		keys := lockObjects(t, s)
		if len(keys) == 1 {
			t.Logf("collected after %d later operations", i+1)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d later operations the killed holder's objects are still there: %d lock objects, first %v", i+1, len(keys), keys[:min(len(keys), 8)])
		}
		time.Sleep(200 * time.Millisecond)
	}
	if tok := op(t, s, ttl, treelock.Request{Write: []string{"/killed/x"}}, "/killed/x"); tok <= killed {
		t.Fatalf("token of /killed/x after the cleanup %d, the killed holder had %d: it went backwards", tok, killed)
	}
}

// Tokens: every grant on a path takes the next one, in any mode; a request
// has one for each path it names and for the ancestors it locks.
func TestFencingTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	a, b := treelock.New(s, nil), treelock.New(s, nil)
	defer a.Close()
	defer b.Close()
	h1, err := a.Acquire(ctx, treelock.Request{Write: []string{"/d/x"}, Read: []string{"/r"}})
	if err != nil {
		t.Fatal(err)
	}
	if h1.Token("/d/x") != 1 || h1.Token("/d/x/") != 1 || h1.Token("/r") != 1 || h1.Token("/") != 1 || h1.Token("/nope") != 0 {
		t.Fatalf("tokens of a first request: /d/x %d, /r %d, / %d, /nope %d", h1.Token("/d/x"), h1.Token("/r"), h1.Token("/"), h1.Token("/nope"))
	}
	h2, err := b.Acquire(ctx, treelock.Request{Read: []string{"/r"}})
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token("/r") != 2 {
		t.Fatalf("a second reader of /r: token %d, want 2", h2.Token("/r"))
	}
	h2.Release(ctx)
	h1.Release(ctx) // empties the tree: everything below the root is swept
	if keys := lockObjects(t, s); len(keys) != 3 || keys[0] != "paths/%2F" {
		t.Fatalf("after release: %v, want the root's node and the two sessions", keys)
	}
	h3, err := b.Acquire(ctx, treelock.Request{Write: []string{"/d/x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Release(ctx)
	if h3.Token("/d/x") <= 1 {
		t.Fatalf("token of /d/x after its node was swept: %d, want more than 1", h3.Token("/d/x"))
	}
}

// Close deletes the session's document: the held entries are free for
// others at once.
func TestCloseDeletesSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	a := treelock.New(s, &treelock.Options{TTL: time.Hour})
	h, err := a.Acquire(ctx, treelock.Request{Write: []string{"/x"}})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case <-h.Done():
	default:
		t.Fatal("Done still open after Close")
	}
	if !errors.Is(h.Err(), treelock.ErrClosed) || !errors.Is(h.Release(ctx), treelock.ErrClosed) {
		t.Fatalf("after Close: Err %v, Release %v; want ErrClosed", h.Err(), h.Release(ctx))
	}
	b := treelock.New(s, &treelock.Options{TTL: time.Hour})
	defer b.Close()
	hb, err := b.TryAcquire(ctx, treelock.Request{Write: []string{"/x"}})
	if err != nil {
		t.Fatalf("after the holder's Close: %v", err)
	}
	hb.Release(ctx)
}

// A session whose document others deleted (they judged it dead) is lost at
// its next renewal: every Held of it sees Done closed, Err and Release
// return ErrSessionLost. Before, the renewal wrote the document again and
// the holder went on as if nothing had happened. The Manager then starts a
// new session for its next request.
func TestSessionDeletedByOthersIsLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		const ttl = 300 * time.Millisecond
		m := treelock.New(s, &treelock.Options{TTL: ttl})
		defer m.Close()
		h, err := m.Acquire(ctx, treelock.Request{Write: []string{"/x"}})
		if err != nil {
			t.Fatal(err)
		}
		var sessions []string
		for _, k := range lockObjects(t, s) {
			if strings.HasPrefix(k, "sessions/") {
				sessions = append(sessions, k)
			}
		}
		if len(sessions) != 1 {
			t.Fatalf("sessions %v", sessions)
		}
		if err := s.Delete(ctx, prefix+sessions[0], objstore.Condition{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		<-h.Done()
		if waited := time.Since(start); waited > ttl/3 {
			t.Fatalf("lost after %v, want at the next renewal (TTL/3)", waited)
		}
		if !errors.Is(h.Err(), treelock.ErrSessionLost) || !errors.Is(h.Release(ctx), treelock.ErrSessionLost) {
			t.Fatalf("Err %v, Release %v; want ErrSessionLost", h.Err(), h.Release(ctx))
		}
		h2, err := m.Acquire(ctx, treelock.Request{Write: []string{"/x"}})
		if err != nil {
			t.Fatalf("the next request, on a new session: %v", err)
		}
		if err := h2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
