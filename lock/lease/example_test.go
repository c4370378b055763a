package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Two workers share one lease. Each acquisition gets a fencing token larger
// than every earlier one: pass it to whatever the holder writes (package
// fence), so that a holder that lost its lease cannot overwrite its successor.
func ExampleManager_Acquire() {
	ctx := context.Background()
	s := mem.Open()
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

// Options.Clock drives a lease's time. Here the holder's clock never moves,
// as if its process were paused: it never renews, and by its own clock its
// lease is still valid. The waiter's clock is moved by hand: it takes the
// lease over once it has watched it unchanged for a whole TTL, with the
// next fencing token, which is all that stops the paused holder.
func ExampleOptions() {
	ctx := context.Background()
	s := mem.Open()
	paused := clockwork.NewFakeClock() // never advanced
	a := lease.New(s, &lease.Options{TTL: 30 * time.Second, Clock: paused})
	la, err := a.Acquire(ctx, "jobs/compact")
	if err != nil {
		panic(err)
	}

	clock := clockwork.NewFakeClock()
	b := lease.New(s, &lease.Options{TTL: 30 * time.Second, Clock: clock})
	got := make(chan *lease.Lease)
	go func() {
		lb, err := b.Acquire(ctx, "jobs/compact")
		if err != nil {
			panic(err)
		}
		got <- lb
	}()
	for range 10 { // a whole TTL, one poll (TTL/10) at a time
		_ = clock.BlockUntilContext(ctx, 1) // b waits for its next poll
		clock.Advance(3 * time.Second)
	}
	lb := <-got
	fmt.Println("b took over, token", lb.Token())
	fmt.Println("the paused holder, token", la.Token(), "valid by its own clock:", la.Valid())
	fmt.Println("its release:", errors.Is(la.Release(ctx), lease.ErrLeaseLost))
	fmt.Println("b releases:", lb.Release(ctx))
	// Output:
	// b took over, token 2
	// the paused holder, token 1 valid by its own clock: true
	// its release: true
	// b releases: <nil>
}
