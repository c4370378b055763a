package cairn_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

func TestSentinel(t *testing.T) {
	a := cairn.Sentinel(cairn.ErrLost, "thing: lost it")
	b := cairn.Sentinel(cairn.ErrLost, "thing: lost it")
	if a.Error() != "thing: lost it" {
		t.Fatalf("message %q", a.Error())
	}
	wrapped := fmt.Errorf("renew: %w", a)
	if !errors.Is(wrapped, a) || !errors.Is(wrapped, cairn.ErrLost) {
		t.Fatal("a wrapped sentinel is neither itself nor its kind")
	}
	if errors.Is(wrapped, b) {
		t.Fatal("two sentinels with one message are the same error")
	}
	if errors.Is(wrapped, cairn.ErrNotFound) || errors.Is(wrapped, cairn.ErrNotAcquired) {
		t.Fatal("a sentinel is of a kind it was not made with")
	}
}

// TestLayersShareKinds: every layer's "not found", "lost" and "not
// acquired" answers the shared question too, and no other.
func TestLayersShareKinds(t *testing.T) {
	kinds := []error{cairn.ErrNotFound, cairn.ErrLost, cairn.ErrNotAcquired}
	for _, c := range []struct {
		name string
		err  error
		kind error
	}{
		{"objstore.ErrNotFound", objstore.ErrNotFound, cairn.ErrNotFound},
		{"ledger.ErrNotFound", ledger.ErrNotFound, cairn.ErrNotFound},
		{"folder.ErrNotFound", folder.ErrNotFound, cairn.ErrNotFound},
		{"ledger.ErrLeaseLost", ledger.ErrLeaseLost, cairn.ErrLost},
		{"ledger.ErrSuperseded", ledger.ErrSuperseded, cairn.ErrLost},
		{"lease.ErrLeaseLost", lease.ErrLeaseLost, cairn.ErrLost},
		{"treelock.ErrSessionLost", treelock.ErrSessionLost, cairn.ErrLost},
		{"treelock.ErrClosed", treelock.ErrClosed, cairn.ErrLost},
		{"folder.ErrLockLost", folder.ErrLockLost, cairn.ErrLost},
		{"lease.ErrNotAcquired", lease.ErrNotAcquired, cairn.ErrNotAcquired},
		{"treelock.ErrNotAcquired", treelock.ErrNotAcquired, cairn.ErrNotAcquired},
	} {
		err := fmt.Errorf("context: %w", c.err)
		for _, k := range kinds {
			if got, want := errors.Is(err, k), k == c.kind; got != want {
				t.Errorf("errors.Is(%s, %v) = %v, want %v", c.name, k, got, want)
			}
		}
	}
}

// Asking one question of errors from any layer.
func ExampleSentinel() {
	// A layer declares its own sentinel of a shared kind…
	errSessionLost := cairn.Sentinel(cairn.ErrLost, "mylock: session lost")
	// …returns it wrapped with context…
	err := fmt.Errorf("renew %q: %w", "jobs/a", errSessionLost)
	// …and a caller may ask either question.
	fmt.Println(err)
	fmt.Println(errors.Is(err, errSessionLost), errors.Is(err, cairn.ErrLost), errors.Is(err, cairn.ErrNotFound))
	// Output:
	// renew "jobs/a": mylock: session lost
	// true true false
}
