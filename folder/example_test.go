package folder_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Rename a folder: every object under the source moves to the same relative
// key under the destination, under locks and a crash-safe journal.
func ExampleOps_Rename() {
	ctx := context.Background()
	s := mem.Open()
	for _, k := range []string{"drafts/2024/a.txt", "drafts/2024/b.txt", "drafts/notes.md"} {
		_, _ = s.PutBytes(ctx, k, []byte("text of "+k), nil)
	}

	ops := folder.New(s, nil) // locks with a treelock.Manager on s
	defer ops.Close()

	res, err := ops.Rename(ctx, "drafts", "published", false)
	fmt.Println("renamed:", res.Objects, "objects, err:", err)
	for _, prefix := range []string{"drafts/", "published/"} {
		objs, _ := s.ListAll(ctx, prefix, nil)
		fmt.Println(prefix, len(objs), "objects")
	}

	// The source is gone now: renaming it again is refused.
	_, err = ops.Rename(ctx, "drafts", "published", false)
	fmt.Println("again:", errors.Is(err, folder.ErrNotFound))
	// Output:
	// renamed: 3 objects, err: <nil>
	// drafts/ 0 objects
	// published/ 3 objects
	// again: true
}
