package audit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Two objects are in the bucket, but the ledger heard of only one: the other's
// event was lost. The audit finds it and resubmits it as a
// "cairn:Audit:Missing" event (here a dry run: it only reports).
func ExampleRun() {
	dir, err := os.MkdirTemp("", "cairn-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	led, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	defer led.Close()

	s := mem.Open()
	seen, _ := s.PutBytes(ctx, "orders/0001.json", []byte(`{"id":1}`), nil)
	_, _ = s.PutBytes(ctx, "orders/0002.json", []byte(`{"id":2}`), nil) // its event was lost
	_, err = led.Record(ctx, "webhook", []event.Event{{Bucket: "shop", Key: seen.Key, ETag: seen.ETag,
		Size: seen.Size, Sequencer: "0001", Kind: event.Created}})
	if err != nil {
		panic(err)
	}

	rep, err := audit.Run(ctx, s, led, "shop", &audit.Options{Grace: 0, DryRun: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("listed:", rep.Listed, "missing:", rep.Counts[audit.Missing])
	for _, f := range rep.Findings {
		fmt.Println(f.Class, f.Key, "→", audit.EventName(f.Class))
	}
	fmt.Println("would resubmit:", rep.Resubmitted)
	// Output:
	// listed: 2 missing: 1
	// missing orders/0002.json → cairn:Audit:Missing
	// would resubmit: 1
}
