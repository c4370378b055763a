package natssrc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/natssrc"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// A pipeline fed from a JetStream stream, as MinIO's NATS target publishes
// to it (here an embedded nats-server). A message is acknowledged once the
// ledger's decision on its events is durable; the handler then runs.
func Example() {
	dir, err := os.MkdirTemp("", "cairn-natssrc-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(dir, "nats"), NoSigs: true, NoLog: true})
	if err != nil {
		panic(err)
	}
	go ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}

	// The bucket's notification, published to the stream before cairn runs.
	ctx := context.Background()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BUCKET_EVENTS", Subjects: []string{"minio.events"}}); err != nil {
		panic(err)
	}
	body := event.S3Body(event.Event{Bucket: "photos", Key: "2026/cat.jpg", Sequencer: "0055AED6DCD90281E5", Kind: event.Created, ETag: "e1"})
	if _, err := js.Publish(ctx, "minio.events", body); err != nil {
		panic(err)
	}

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
	src, err := natssrc.Open(ctx, ns.ClientURL(), "BUCKET_EVENTS", &natssrc.Options{Subject: "minio.events"})
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
	// photos/2026/cat.jpg from nats, attempt 1
}
