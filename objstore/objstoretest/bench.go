package objstoretest

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
)

// Bench runs the shared Go benchmarks on a backend: plain put (the baseline),
// put-if-absent and put-if-match (what cairn relies on), get, and a 1,000-key
// listing. Compare PutIfAbsent and PutIfMatch with Put in the same run.
func Bench(b *testing.B, newStore func(b *testing.B) *objstore.Store) {
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), 4096)
	b.Run("Put", func(b *testing.B) {
		s := newStore(b)
		b.SetBytes(int64(len(body)))
		i := 0
		for b.Loop() {
			if _, err := s.PutBytes(ctx, fmt.Sprintf("put/%d", i%512), body, nil); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("PutIfAbsent", func(b *testing.B) {
		s := newStore(b)
		b.SetBytes(int64(len(body)))
		i := 0
		for b.Loop() {
			if _, err := s.PutBytes(ctx, fmt.Sprintf("once/%d", i), body, &objstore.PutOptions{If: objstore.IfAbsent()}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("PutIfMatch", func(b *testing.B) {
		s := newStore(b)
		b.SetBytes(int64(len(body)))
		info, err := s.PutBytes(ctx, "cas", body, nil)
		if err != nil {
			b.Fatal(err)
		}
		data := bytes.Clone(body)
		i := 0
		for b.Loop() {
			data[0] = byte(i)
			if info, err = s.PutBytes(ctx, "cas", data, &objstore.PutOptions{If: objstore.IfMatch(info.ETag)}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Get", func(b *testing.B) {
		s := newStore(b)
		if _, err := s.PutBytes(ctx, "get", body, nil); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, _, err := s.GetBytes(ctx, "get"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List1000", func(b *testing.B) {
		s := newStore(b)
		for i := range 1000 {
			if _, err := s.PutBytes(ctx, fmt.Sprintf("list/%04d", i), []byte("x"), nil); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			n := 0
			for _, err := range s.List(ctx, "list/", nil) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != 1000 {
				b.Fatalf("listed %d", n)
			}
		}
	})
}
