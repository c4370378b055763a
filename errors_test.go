package cairn_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cairn-s3/cairn"
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
