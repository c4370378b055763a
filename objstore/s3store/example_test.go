package s3store_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// Opening an S3 store sends no request: by URL, the form every cairn command
// takes (s3://bucket/prefix?…), or from Options, for a Backend to wrap.
func Example() {
	ctx := context.Background()
	s, err := objstore.Open(ctx, "s3://photos/tenant-a?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true", nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	fmt.Println(s)

	b, err := s3store.OpenBackend(ctx, "photos", &s3store.Options{Endpoint: "http://127.0.0.1:9000",
		Region: "us-east-1", PathStyle: true, AccessKeyID: "minioadmin", SecretAccessKey: "minioadmin"})
	if err != nil {
		panic(err)
	}
	fmt.Println(objstore.New(b, nil))
	// Output:
	// s3://photos at http://127.0.0.1:9000/tenant-a/
	// s3://photos at http://127.0.0.1:9000
}

// A write-once upload to a MinIO on 127.0.0.1:9000. The first conditional
// write probes what the endpoint enforces (and saves the verdict); on a server
// that ignores If-None-Match the write is refused with ErrNotSupported rather
// than sent unconditionally. (Not run: it needs a server; the package's tests
// run the same against MinIO, versitygw and gofakes3.)
func Example_writeOnce() {
	ctx := context.Background()
	s, err := objstore.Open(ctx, "s3://photos?endpoint=http://127.0.0.1:9000&path_style=true&create_bucket=true", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	_, err = s.PutBytes(ctx, "2026/cat.jpg", []byte("…"), &objstore.PutOptions{If: objstore.IfAbsent()})
	switch {
	case err == nil:
		fmt.Println("written")
	case errors.Is(err, objstore.ErrPreconditionFailed):
		fmt.Println("already there: someone else wrote it first")
	case errors.Is(err, objstore.ErrNotSupported):
		fmt.Println("the endpoint does not enforce write-once:", err)
	default:
		fmt.Println(err)
	}
}
