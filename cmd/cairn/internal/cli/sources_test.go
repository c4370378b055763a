package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// TestServeMinIONATS: MinIO's NATS target (JetStream on) publishes to an
// in-process nats-server; cairn serve consumes the stream with a durable pull
// consumer; the handler's effects match the bucket.
func TestServeMinIONATS(t *testing.T) {
	t.Parallel()
	natsURL := testenv.NATS(t)
	addr := strings.TrimPrefix(natsURL, "nats://")
	e := newE2E(t, "0")
	e.serveArgs = append(e.serveArgs, "--source", "nats://"+addr+"?stream=MINIO&subject=minio.events&durable=cairn")
	e.serve(t) // creates the stream before MinIO publishes to it
	e.minioWith(t, "arn:minio:sqs::CAIRN:nats",
		"MINIO_NOTIFY_NATS_ENABLE_CAIRN=on", "MINIO_NOTIFY_NATS_ADDRESS_CAIRN="+addr,
		"MINIO_NOTIFY_NATS_SUBJECT_CAIRN=minio.events", "MINIO_NOTIFY_NATS_JETSTREAM_CAIRN=on")
	writeWorkload(t, e.store, 3)
	waitMatch(t, e.store, e.effects, 60*time.Second)
}

// TestServeMinIOKafka: MinIO's Kafka target produces to an in-process Kafka
// (kfake); cairn serve consumes in a consumer group, committing after the
// ledger's decision; the handler's effects match the bucket.
func TestServeMinIOKafka(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "minio-events"), kfake.ListenFn(listenLoopback))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	e := newE2E(t, "0")
	e.serveArgs = append(e.serveArgs, "--source", "kafka://"+brokers+"?topic=minio-events&group=cairn")
	e.serve(t)
	e.minioWith(t, "arn:minio:sqs::CAIRN:kafka",
		"MINIO_NOTIFY_KAFKA_ENABLE_CAIRN=on", "MINIO_NOTIFY_KAFKA_BROKERS_CAIRN="+brokers, "MINIO_NOTIFY_KAFKA_TOPIC_CAIRN=minio-events")
	writeWorkload(t, e.store, 3)
	waitMatch(t, e.store, e.effects, 60*time.Second)
}
