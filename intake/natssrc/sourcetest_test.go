package natssrc_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/natssrc"
	"github.com/cairn-s3/cairn/intake/sourcetest"
)

// TestSources runs the sources conformance suite on an in-process NATS
// JetStream server, one stream per case.
func TestSources(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	var n atomic.Int64
	sourcetest.Run(t, sourcetest.Harness{Open: func(t *testing.T) sourcetest.Queue {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		i := n.Add(1)
		q := &natsQueue{url: ns.ClientURL(), js: js, stream: fmt.Sprint("EV", i), subject: fmt.Sprint("ev", i)}
		// The stream exists before anything is published; the source finds it.
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: q.stream, Subjects: []string{q.subject}}); err != nil {
			t.Fatal(err)
		}
		return q
	}})
}

type natsQueue struct {
	url, stream, subject string
	js                   jetstream.JetStream
}

func (q *natsQueue) Publish(t *testing.T, body []byte) {
	if _, err := q.js.Publish(context.Background(), q.subject, body); err != nil {
		t.Fatal(err)
	}
}

func (q *natsQueue) Source(t *testing.T) intake.Source {
	src, err := natssrc.New(natssrc.Options{Servers: q.url, Stream: q.stream, Subject: q.subject, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Outstanding: messages not yet delivered, and delivered but neither acked
// nor terminated (a nak'd message waiting for redelivery counts among the
// pending acks). Before the source created its consumer, everything is.
func (q *natsQueue) Outstanding(ctx context.Context) (int, error) {
	s, err := q.js.Stream(ctx, q.stream)
	if err != nil {
		return 0, err
	}
	c, err := s.Consumer(ctx, "cairn")
	if err != nil {
		return int(s.CachedInfo().State.Msgs), nil
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(ci.NumPending) + ci.NumAckPending, nil
}
