package faulty_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// With no faults but with latency, the wrapper keeps every guarantee.
func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		inner := mem.OpenBackend(t.Name())
		b := faulty.New(inner, &faulty.Options{Jitter: 200 * time.Microsecond})
		return objstoretest.Instance{Store: objstore.New(b, nil), Uploads: inner.Uploads}
	}})
}

func TestFaultKinds(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		fault     faulty.Fault
		wantErr   error
		wantExist bool
	}{
		{faulty.Fail, faulty.ErrInjected, false},
		{faulty.LostRequest, objstore.ErrAmbiguous, false},
		{faulty.LostResponse, objstore.ErrAmbiguous, true},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			t.Parallel()
			inner := mem.OpenBackend("")
			b := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
				if op == faulty.OpPut {
					return tc.fault, 0
				}
				return faulty.None, 0
			}})
			s := objstore.New(b, nil)
			_, err := s.PutBytes(ctx, "k", []byte("v"), &objstore.PutOptions{If: objstore.IfAbsent()})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("put: %v, want %v", err, tc.wantErr)
			}
			_, herr := objstore.New(inner, nil).Head(ctx, "k")
			if exists := herr == nil; exists != tc.wantExist {
				t.Fatalf("object exists = %v after %s, want %v", exists, tc.fault, tc.wantExist)
			}
			if st := b.Stats(); st.Calls != 1 {
				t.Errorf("stats %+v, want one call", st)
			}
		})
	}
}

// The same seed gives the same faults, so a failing run can be replayed.
func TestSeedReplays(t *testing.T) {
	run := func(seed uint64) []bool {
		b := faulty.New(mem.OpenBackend(""), &faulty.Options{Seed: seed, FailRate: 0.3, LostResponseRate: 0.2})
		s := objstore.New(b, nil)
		var out []bool
		for range 50 {
			_, err := s.PutBytes(context.Background(), "k", []byte("v"), nil)
			out = append(out, err == nil)
		}
		return out
	}
	a, b := run(7), run(7)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different faults")
	}
	if slices.Equal(a, run(8)) {
		t.Fatal("different seeds, same faults (50 draws)")
	}
}

// A store that accepts conditional headers and ignores them must be caught by the
// probe, and the Store must refuse conditional writes instead of silently
// making them unconditional.
func TestProbeCatchesIgnoredConditions(t *testing.T) {
	ctx := context.Background()
	liar := faulty.New(mem.OpenBackend(""), &faulty.Options{IgnoreConditions: true})
	s := objstore.New(liar, nil)
	rep, err := objstore.Probe(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.Enforced {
			t.Errorf("probe says %s is enforced by a store that ignores conditions: %s", c.Name, c.Outcome)
		}
	}
	if rep.Winners <= 1 {
		t.Errorf("racing creates on a liar: %d winners, want many", rep.Winners)
	}
	if _, err := s.PutBytes(ctx, "k", []byte("x"), nil); err != nil {
		t.Fatalf("plain put: %v", err)
	}
	_, err = s.PutBytes(ctx, "k", []byte("y"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if !errors.Is(err, objstore.ErrNotSupported) {
		t.Fatalf("conditional put on a liar: %v, want ErrNotSupported", err)
	}
	if data, _, _ := s.GetBytes(ctx, "k"); string(data) != "x" {
		t.Fatalf("refused conditional put changed the object to %q", data)
	}
	// A fresh Store on the liar probes lazily on its first conditional write.
	s2 := objstore.New(liar, nil)
	if _, err := s2.PutBytes(ctx, "k2", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()}); !errors.Is(err, objstore.ErrNotSupported) {
		t.Fatalf("first conditional put on an unprobed liar: %v, want ErrNotSupported", err)
	}
}

// A late request: the caller gets ErrAmbiguous at once, the store applies the
// write afterwards, with its condition judged when it lands.
func TestLateApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("")
	late := true
	var mu sync.Mutex
	b := faulty.New(inner, &faulty.Options{LateDelay: 50 * time.Millisecond, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if op == faulty.OpPut && late {
			late = false
			return faulty.LateApply, 0
		}
		return faulty.None, 0
	}})
	s := objstore.New(b, nil)
	direct := objstore.New(inner, nil)
	first, err := direct.PutBytes(ctx, "k", []byte("v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Conditional on v1: it is still v1 when the request lands, so it lands.
	buf := []byte("v2")
	_, err = s.PutBytes(ctx, "k", buf, &objstore.PutOptions{If: objstore.IfMatch(first.ETag)})
	if !errors.Is(err, objstore.ErrAmbiguous) {
		t.Fatalf("late put: %v, want ErrAmbiguous", err)
	}
	copy(buf, "xx") // the caller reuses its buffer: the late request kept a copy
	if got, _, _ := direct.GetBytes(ctx, "k"); string(got) != "v1" {
		t.Fatalf("before landing: %q, want v1", got)
	}
	b.Wait()
	if got, _, _ := direct.GetBytes(ctx, "k"); string(got) != "v2" {
		t.Fatalf("after landing: %q, want v2", got)
	}
	if st := b.Stats(); st.LateApplied != 1 || st.LateLanded != 1 {
		t.Errorf("stats %+v, want one late request, landed", st)
	}

	// Conditional on an ETag that has moved on by the time it lands: refused.
	mu.Lock()
	late = true
	mu.Unlock()
	cur, _ := direct.Head(ctx, "k")
	if _, err := s.PutBytes(ctx, "k", []byte("v3"), &objstore.PutOptions{If: objstore.IfMatch(cur.ETag)}); !errors.Is(err, objstore.ErrAmbiguous) {
		t.Fatalf("late put: %v, want ErrAmbiguous", err)
	}
	if _, err := direct.PutBytes(ctx, "k", []byte("v4"), nil); err != nil {
		t.Fatal(err)
	}
	b.Wait()
	if got, _, _ := direct.GetBytes(ctx, "k"); string(got) != "v4" {
		t.Fatalf("a late write landed on an ETag it was not conditional on: %q, want v4", got)
	}
	if st := b.Stats(); st.LateApplied != 2 || st.LateLanded != 1 {
		t.Errorf("stats %+v, want two late requests, one landed", st)
	}
}

// A store that judges conditions by check-then-act (enforced alone, not under
// races, as SeaweedFS 4.16 and an older versitygw were) passes every
// single-write check, and the probe's racing rounds must still catch it, for
// creates and for updates.
func TestProbeCatchesRacyConditions(t *testing.T) {
	ctx := context.Background()
	racy := faulty.New(mem.OpenBackend(""), &faulty.Options{RacyConditions: true})
	rep, err := objstore.Probe(ctx, objstore.New(racy, nil), &objstore.ProbeOptions{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	enforced := map[string]bool{}
	for _, c := range rep.Checks {
		enforced[c.Name] = c.Enforced
		t.Logf("%s: %v (%s)", c.Name, c.Enforced, c.Outcome)
	}
	if !enforced["put-if-absent"] || !enforced["put-if-match"] {
		t.Fatalf("a lone conditional write is refused correctly by this store: %v", enforced)
	}
	if enforced["racing-creates"] || enforced["racing-updates"] {
		t.Errorf("racing checks passed on a check-then-act store: %v", enforced)
	}
	if rep.Capabilities.PutIfAbsent || rep.Capabilities.PutIfMatch {
		t.Errorf("capabilities %+v: conditional puts that lose under races must not count as enforced", rep.Capabilities)
	}
	if rep.Winners <= 1 {
		t.Errorf("worst round had %d winners, want several", rep.Winners)
	}
}

func TestQuirks(t *testing.T) {
	ctx := context.Background()
	f := faulty.New(mem.OpenBackend(""), &faulty.Options{Quirks: faulty.Quirks{MissingIfMatchNotFound: true, DeleteMissingOK: true}})
	s := objstore.New(f, nil)
	if _, err := s.PutBytes(ctx, "missing", []byte("x"), &objstore.PutOptions{If: objstore.IfMatch("0123456789abcdef0123456789abcdef")}); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("if-match on a missing key: %v, want ErrNotFound (the AWS answer)", err)
	}
	v, err := s.PutBytes(ctx, "k", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBytes(ctx, "k", []byte("y"), &objstore.PutOptions{If: objstore.IfMatch("0123456789abcdef0123456789abcdef")}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Errorf("if-match with a wrong ETag on an existing key: %v, want ErrPreconditionFailed", err)
	}
	if err := s.Delete(ctx, "k", objstore.IfMatch(v.ETag)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k", objstore.IfMatch(v.ETag)); err != nil {
		t.Errorf("conditional delete of a missing key: %v, want nil (the versitygw answer)", err)
	}
	c := objstore.New(faulty.New(mem.OpenBackend(""), &faulty.Options{Quirks: faulty.Quirks{ConflictRate: 1}}), nil)
	if _, err := c.PutBytes(ctx, "k", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()}); !errors.Is(err, objstore.ErrConflict) {
		t.Errorf("conditional put at ConflictRate 1: %v, want ErrConflict", err)
	}
	if _, err := c.Head(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("a 409 applied the write")
	}
}

// Full refuses what stores data, as a full disk does (nothing applied,
// ErrUnwritable wrapping ENOSPC), and lets reads and deletes through.
func TestFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("")
	s := objstore.New(faulty.New(inner, &faulty.Options{Rule: func(faulty.Op, string) (faulty.Fault, time.Duration) { return faulty.Full, 0 }}), nil)
	if _, err := objstore.New(inner, nil).PutBytes(ctx, "old", []byte("old"), nil); err != nil {
		t.Fatal(err)
	}
	_, err := s.PutBytes(ctx, "new", []byte("new"), nil)
	if !errors.Is(err, objstore.ErrUnwritable) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("put on a full store: %v, want ErrUnwritable wrapping ENOSPC", err)
	}
	if _, err := s.Copy(ctx, "old", "copy", objstore.Condition{}); !errors.Is(err, objstore.ErrUnwritable) {
		t.Fatalf("copy on a full store: %v, want ErrUnwritable", err)
	}
	if _, err := inner.Head(ctx, "new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused put was applied: %v", err)
	}
	if got, _, err := s.GetBytes(ctx, "old"); err != nil || string(got) != "old" {
		t.Fatalf("get on a full store: %q %v", got, err)
	}
	if err := s.Delete(ctx, "old", objstore.Condition{}); err != nil {
		t.Fatalf("delete on a full store: %v", err)
	}
}
