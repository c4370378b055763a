package lease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Two workers share one lease. Each acquisition gets a fencing token larger
// than every earlier one: pass it to whatever the holder writes (package
// fence), so that a holder that lost its lease cannot overwrite its successor.
func ExampleManager_Acquire() {
	ctx := context.Background()
	s := mem.New()
	a := lease.New(s, nil)
	b := lease.New(s, nil)

	l, err := a.Acquire(ctx, "jobs/nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("a holds it, token", l.Token())

	_, err = b.TryAcquire(ctx, "jobs/nightly-report")
	fmt.Println("b refused:", errors.Is(err, lease.ErrNotAcquired))

	fmt.Println("a releases:", l.Release(ctx))
	l2, err := b.TryAcquire(ctx, "jobs/nightly-report")
	if err != nil {
		panic(err)
	}
	defer l2.Release(ctx)
	fmt.Println("b holds it, token", l2.Token())
	// Output:
	// a holds it, token 1
	// b refused: true
	// a releases: <nil>
	// b holds it, token 2
}
