package fsstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// A store on a local directory: the directory is the bucket and a key is a
// file under it, with the same conditions as S3, atomic across processes.
func Example() {
	dir, err := os.MkdirTemp("", "cairn-fsstore-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := fsstore.Open(dir, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	v1, err := s.PutBytes(ctx, "reports/2026/q3.csv", []byte("region,total\n"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if err != nil {
		panic(err)
	}
	_, err = s.PutBytes(ctx, "reports/2026/q3.csv", []byte("region,total\neu,7\n"), &objstore.PutOptions{If: objstore.IfMatch(v1.ETag)})
	fmt.Println("CAS on the current ETag:", err)
	_, err = s.PutBytes(ctx, "reports/2026/q3.csv", []byte("stale\n"), &objstore.PutOptions{If: objstore.IfMatch(v1.ETag)})
	fmt.Println("CAS on a stale ETag refused:", errors.Is(err, objstore.ErrPreconditionFailed))
	data, _ := os.ReadFile(filepath.Join(dir, "reports", "2026", "q3.csv"))
	fmt.Printf("the file holds: %q\n", data)
	// Output:
	// CAS on the current ETag: <nil>
	// CAS on a stale ETag refused: true
	// the file holds: "region,total\neu,7\n"
}
