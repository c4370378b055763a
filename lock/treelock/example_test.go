package treelock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// One request locks two folders for writing, across processes sharing the
// store; each path's grant carries its own fencing token. Another process
// asking for one of them waits (TryAcquire: is refused) until they are
// released, and its grant then gets the path's next token. Release
// reports whether the locks were held to the end (see Held.Release).
func ExampleManager_Acquire() {
	ctx := context.Background()
	s := mem.Open()
	a := treelock.New(s, nil)
	defer a.Close()
	b := treelock.New(s, nil)
	defer b.Close()

	h, err := a.Acquire(ctx, treelock.Request{Write: []string{"/photos/2024", "/reports"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("/photos/2024 token", h.Token("/photos/2024"))
	fmt.Println("/reports token", h.Token("/reports"))

	_, err = b.TryAcquire(ctx, treelock.Request{Read: []string{"/photos"}})
	fmt.Println("reader of /photos refused:", errors.Is(err, treelock.ErrNotAcquired))

	fmt.Println("a releases:", h.Release(ctx))
	<-h.Done() // closed by the release (or by a lost session: then Err says so)
	fmt.Println("a's Err after its release:", h.Err())
	h2, err := b.Acquire(ctx, treelock.Request{Write: []string{"/photos/2024"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("next /photos/2024 token", h2.Token("/photos/2024"))
	if err := h2.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// /photos/2024 token 1
	// /reports token 1
	// reader of /photos refused: true
	// a releases: <nil>
	// a's Err after its release: <nil>
	// next /photos/2024 token 2
}
