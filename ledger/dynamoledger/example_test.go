package dynamoledger_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger/dynamoledger"
)

// A ledger in a DynamoDB table (here a local dynalite), made on first use:
// record a delivery, claim its work with a fencing token, complete it. (Not
// run: it needs a DynamoDB endpoint; the package's tests run the same on
// dynalite.)
func Example() {
	ctx := context.Background()
	l, err := dynamoledger.Open(ctx, "dynamodb://cairn-ledger?region=us-east-1&endpoint=http://127.0.0.1:4567&create_table=true", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	ds, err := l.Record(ctx, "webhook", []event.Event{{Bucket: "photos", Key: "2026/cat.jpg", Sequencer: "0055AED6DCD90281E5", Kind: event.Created}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ds[0].Outcome)
	cs, err := l.Claim(ctx, 10, time.Minute)
	if err != nil || len(cs) == 0 {
		fmt.Println(cs, err)
		return
	}
	fmt.Println("token", cs[0].Token)
	// After the lease ran out and another worker took over, Complete is
	// refused (ledger.ErrLeaseLost or ledger.ErrSuperseded).
	if err := l.Complete(ctx, cs[0], "thumbnail written"); err != nil {
		fmt.Println(err)
	}
}
