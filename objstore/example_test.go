package objstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Write-once and compare-and-swap: the two conditions everything else in cairn
// is built on.
func ExampleStore_Put() {
	ctx := context.Background()
	s := mem.Open()

	// Write-once: the second create of the same key is refused.
	v1, _ := s.PutBytes(ctx, "datasets/2024/part-0001.parquet", []byte("rows"), &objstore.PutOptions{If: objstore.IfAbsent()})
	_, err := s.PutBytes(ctx, "datasets/2024/part-0001.parquet", []byte("other rows"), &objstore.PutOptions{If: objstore.IfAbsent()})
	fmt.Println("second create refused:", errors.Is(err, objstore.ErrPreconditionFailed))

	// Compare-and-swap: a write based on a stale read is refused.
	reg, _ := s.PutBytes(ctx, "metastore/registry.json", []byte(`{"v":1}`), nil)
	_, err = s.PutBytes(ctx, "metastore/registry.json", []byte(`{"v":2}`), &objstore.PutOptions{If: objstore.IfMatch(reg.ETag)})
	fmt.Println("fresh CAS ok:", err == nil)
	_, err = s.PutBytes(ctx, "metastore/registry.json", []byte(`{"v":3}`), &objstore.PutOptions{If: objstore.IfMatch(reg.ETag)})
	fmt.Println("stale CAS refused:", errors.Is(err, objstore.ErrPreconditionFailed))
	fmt.Println("ETag (MD5 of the content):", v1.ETag)
	// Output:
	// second create refused: true
	// fresh CAS ok: true
	// stale CAS refused: true
	// ETag (MD5 of the content): df347a373b8f92aa0ae3dd920a5ec2f6
}

// List yields keys in UTF-8 byte order, folding "folders" with a delimiter.
func ExampleStore_List() {
	ctx := context.Background()
	s := mem.Open()
	for _, k := range []string{"logs/b.txt", "logs/a.txt", "logs/2024/x", "readme"} {
		_, _ = s.PutBytes(ctx, k, []byte("x"), nil)
	}
	for info, err := range s.List(ctx, "logs/", &objstore.ListOptions{Delimiter: "/"}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(info.Key, info.IsPrefix)
	}
	// Output:
	// logs/2024/ true
	// logs/a.txt false
	// logs/b.txt false
}

// Probe proves what a store enforces; here a store that accepts conditional
// headers and ignores them would report false for each of them.
func ExampleProbe() {
	ctx := context.Background()
	rep, err := objstore.Probe(ctx, mem.Open(), nil)
	if err != nil {
		panic(err)
	}
	for _, c := range rep.Checks {
		fmt.Println(c.Name, c.Enforced)
	}
	// Output:
	// put-if-absent true
	// put-if-match true
	// delete-if-match true
	// copy-if-absent true
	// copy-if-match true
	// multipart-if-absent true
	// multipart-if-match true
	// racing-creates true
	// racing-updates true
}
