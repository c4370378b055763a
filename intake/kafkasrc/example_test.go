package kafkasrc_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/kafkasrc"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// A pipeline fed from a Kafka topic, as MinIO's Kafka target produces to it
// (here an in-process kfake cluster). The consumer group's offset is
// committed once the ledger's decision on the records' events is durable; the
// handler then runs.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "bucket-events"),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	// The bucket's notification, produced before cairn runs (a new group
	// starts at the topic's first record).
	ctx := context.Background()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("bucket-events"))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	body := event.S3Body(event.Event{Bucket: "photos", Key: "2026/cat.jpg", Sequencer: "0055AED6DCD90281E5", Kind: event.Created, ETag: "e1"})
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: body}).FirstErr(); err != nil {
		panic(err)
	}

	dir, err := os.MkdirTemp("", "cairn-kafkasrc-example-")
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
	src, err := kafkasrc.Open(ctx, cluster.ListenAddrs(), "bucket-events", nil)
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
	// photos/2026/cat.jpg from kafka, attempt 1
}
