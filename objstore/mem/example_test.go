package mem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A private in-memory store: it enforces every condition itself, so it never
// probes, and is what examples and unit tests run on.
func Example() {
	ctx := context.Background()
	s := mem.Open()
	defer s.Close()
	if _, err := s.PutBytes(ctx, "jobs/42.json", []byte(`{"state":"queued"}`), &objstore.PutOptions{If: objstore.IfAbsent()}); err != nil {
		panic(err)
	}
	_, err := s.PutBytes(ctx, "jobs/42.json", []byte(`{"state":"other"}`), &objstore.PutOptions{If: objstore.IfAbsent()})
	fmt.Println("second create refused:", errors.Is(err, objstore.ErrPreconditionFailed))
	caps, _ := s.KnownCapabilities()
	fmt.Println("enforces conditional writes:", caps.ConditionalWrites())
	// Output:
	// second create refused: true
	// enforces conditional writes: true
}

// Stores opened by URL as mem://NAME share one backend per name within the
// process: what one writes, the other reads.
func Example_url() {
	ctx := context.Background()
	a, err := objstore.Open(ctx, "mem://example-shared", nil)
	if err != nil {
		panic(err)
	}
	b, err := objstore.Open(ctx, "mem://example-shared", nil)
	if err != nil {
		panic(err)
	}
	if _, err := a.PutBytes(ctx, "greeting", []byte("hello"), nil); err != nil {
		panic(err)
	}
	data, _, err := b.GetBytes(ctx, "greeting")
	fmt.Println(string(data), err)
	// Output:
	// hello <nil>
}
