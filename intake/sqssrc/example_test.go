package sqssrc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/sqssrc"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// A pipeline fed from the SQS queue S3 sends its notifications to. The
// messages are deleted once the ledger's decision on their events is
// durable; the handler then runs. (Here the queue is the package tests'
// in-process fake of SQS's protocol, since no SQS runs locally; in
// production, sqssrc.Open(ctx, "https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE",
// nil) takes its client from the AWS configuration.)
func Example() {
	queue := startFakeSQS()
	defer queue.srv.Close()
	ctx := context.Background()
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(queue.endpoint()), Credentials: aws.AnonymousCredentials{}})

	// The bucket's notification, in the queue before cairn runs.
	body := string(event.S3Body(event.Event{Bucket: "photos", Key: "2026/cat.jpg", Sequencer: "0055AED6DCD90281E5", Kind: event.Created, ETag: "e1"}))
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue.queueURL()), MessageBody: &body}); err != nil {
		panic(err)
	}

	dir, err := os.MkdirTemp("", "cairn-sqssrc-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	led, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	defer led.Close()
	handled := make(chan string, 1)
	p, err := intake.New(led, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		handled <- fmt.Sprintf("%s/%s from %s, attempt %d", w.Event.Bucket, w.Event.Key, w.Source, w.Attempt)
		return "ok", nil
	}), nil)
	if err != nil {
		panic(err)
	}
	src, err := sqssrc.Open(ctx, queue.queueURL(), &sqssrc.Options{Client: client})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(runCtx) })
	wg.Go(func() { _ = src.Run(runCtx, p) })
	fmt.Println(<-handled)
	stop()
	wg.Wait()
	// Output:
	// photos/2026/cat.jpg from sqs, attempt 1
}
