package kafkasrc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/kafkasrc"
	"github.com/cairn-s3/cairn/intake/sourcetest"
)

// TestSources runs the sources conformance suite on an in-process kfake
// cluster, one single-partition topic and group per case.
func TestSources(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	sourcetest.Run(t, sourcetest.Harness{Open: func(t *testing.T) sourcetest.Queue {
		topic := fmt.Sprint("events", n.Add(1))
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic),
			kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		// OffsetFetch v7 (Kafka 2.8): the group and topics at the top level.
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.MaxVersions(kversion.V2_8_0()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return &kafkaQueue{brokers: c.ListenAddrs(), topic: topic, cl: cl}
	}})
}

type kafkaQueue struct {
	brokers   []string
	topic     string
	cl        *kgo.Client
	published atomic.Int64
}

func (q *kafkaQueue) Publish(t *testing.T, body []byte) {
	if err := q.cl.ProduceSync(context.Background(), &kgo.Record{Value: body}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	q.published.Add(1)
}

func (q *kafkaQueue) Source(t *testing.T) intake.Source {
	src, err := kafkasrc.Open(t.Context(), q.brokers, q.topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Outstanding: the records past the group's committed offset.
func (q *kafkaQueue) Outstanding(ctx context.Context) (int, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "cairn"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = q.topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, q.cl)
	if err != nil {
		return 0, err
	}
	committed := int64(0)
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.Offset > 0 {
				committed = p.Offset
			}
		}
	}
	return int(q.published.Load() - committed), nil
}
