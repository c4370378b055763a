package natssrc_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/natssrc"
	"github.com/cairn-s3/cairn/intake/sourcetest"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// TestSources runs the sources conformance suite on an in-process NATS
// JetStream server, one stream per case.
func TestSources(t *testing.T) {
	t.Parallel()
	natsURL := testenv.NATS(t)
	var n atomic.Int64
	sourcetest.Run(t, sourcetest.Harness{Open: func(t *testing.T) sourcetest.Queue {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		i := n.Add(1)
		q := &natsQueue{url: natsURL, js: js, stream: fmt.Sprint("EV", i), subject: fmt.Sprint("ev", i)}
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
	src, err := natssrc.Open(t.Context(), q.url, q.stream, &natssrc.Options{Subject: q.subject, AckWait: 2 * time.Second})
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
