// Package kafkasrc is the Kafka source of cairn's intake (franz-go): it
// consumes object-change notifications (as MinIO's Kafka target produces them,
// or any body the event package parses) in a consumer group and commits
// offsets only after the ledger's decision on the records' events is durable.
//
// If the ledger fails, the same records are submitted again (with backoff)
// until they are recorded; the partition does not move on meanwhile, so
// nothing is skipped. Rebalances are held off while a polled batch is being
// recorded and committed, so a batch is never committed by a member that no
// longer owns its partitions. A record that does not parse (or holds records
// that do not) is kept in the ledger as a refused message (intake.RefusedEvent:
// a dead letter with its reason, replayable), logged with its topic,
// partition and offset, and committed past once recorded (redelivering it
// cannot help).
//
// Linking the package in registers the kafka:// scheme with intake.OpenSource.
package kafkasrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/backoff"
)

// Options configure the source.
type Options struct {
	// Group is the consumer group. Default "cairn".
	Group string
	// MaxPoll caps the records recorded at once. Default 1000.
	MaxPoll int
	// Logger; default: discarded.
	Logger *slog.Logger
	// Client options added to the defaults (TLS, SASL, …).
	Extra []kgo.Opt
}

// Source consumes from Kafka.
type Source struct {
	brokers []string
	topic   string
	o       Options
}

// Open returns a source consuming topic from the brokers (host:port each);
// opts may be nil (the defaults). Nothing connects until Run (ctx is for
// the sources' common signature).
func Open(ctx context.Context, brokers []string, topic string, opts *Options) (*Source, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, errors.New("kafkasrc: brokers and a topic are required")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Group == "" {
		o.Group = "cairn"
	}
	if o.MaxPoll <= 0 {
		o.MaxPoll = 1000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Source{brokers: brokers, topic: topic, o: o}, nil
}

// FromURL parses kafka://HOST:PORT[,HOST:PORT…]?topic=T&group=G.
func FromURL(ctx context.Context, raw string, log *slog.Logger) (*Source, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "kafka" || u.Host == "" {
		return nil, fmt.Errorf("kafkasrc: %q: want kafka://HOST:PORT?topic=T&group=G", raw)
	}
	q := u.Query()
	for k := range q {
		if k != "topic" && k != "group" {
			return nil, fmt.Errorf("kafkasrc: %q: unknown parameter %q (topic, group)", raw, k)
		}
	}
	if q.Get("topic") == "" {
		return nil, fmt.Errorf("kafkasrc: %q: topic= is required", raw)
	}
	return Open(ctx, strings.Split(u.Host, ","), q.Get("topic"), &Options{Group: q.Get("group"), Logger: log})
}

func init() {
	intake.RegisterSource("kafka", func(ctx context.Context, url string, log *slog.Logger) (intake.Source, error) {
		s, err := FromURL(ctx, url, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// Name is "kafka".
func (s *Source) Name() string { return "kafka" }

// Run consumes until ctx is done.
func (s *Source) Run(ctx context.Context, sink intake.Sink) error {
	opts := append([]kgo.Opt{kgo.SeedBrokers(s.brokers...), kgo.ConsumerGroup(s.o.Group), kgo.ConsumeTopics(s.topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ClientID("cairn")}, s.o.Extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafkasrc: %w", err)
	}
	defer cl.Close()
	log := s.o.Logger.With("source", "kafka", "topic", s.topic)
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, s.o.MaxPoll)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			log.Warn("fetch error", "partition", p, "err", err)
		})
		var recs []*kgo.Record
		var evs []event.Event
		fetches.EachRecord(func(r *kgo.Record) {
			recs = append(recs, r)
			got, rejected, err := event.ParseAll(r.Value)
			if kept, ok := intake.RefusedEvent(r.Value, err, rejected); ok {
				// A poison record never blocks the partition: it is kept
				// as a dead letter with its reason (replayable), recorded
				// with the others, and committed.
				log.Warn("record refused in whole or part; kept as a dead letter", "partition", r.Partition, "offset", r.Offset, "bucket", kept.Bucket, "key", kept.Key, "reason", kept.RequestID)
				got = append(got, kept)
			}
			evs = append(evs, got...)
		})
		if len(recs) == 0 {
			cl.AllowRebalance()
			continue
		}
		// Record (retrying until it is durable), then commit.
		for attempt := 0; ; attempt++ {
			_, err := sink.Submit(context.WithoutCancel(ctx), "kafka", evs)
			if err == nil {
				break
			}
			if errors.Is(err, intake.ErrInvalidEvent) { // cannot succeed on a retry
				log.Error("records refused; committed without recording", "records", len(recs), "err", err)
				break
			}
			log.Warn("recording failed; retrying the same records", "records", len(recs), "err", err)
			if recordRetry.Wait(ctx, attempt) != nil {
				cl.AllowRebalance()
				return nil // uncommitted: the group redelivers them
			}
		}
		if err := cl.CommitRecords(context.WithoutCancel(ctx), recs...); err != nil {
			log.Warn("commit failed; the records will be delivered again (the ledger drops the duplicates)", "err", err)
		}
		cl.AllowRebalance()
	}
	return nil
}

// recordRetry spaces the attempts to record a fetch the ledger failed:
// full jitter from 100ms, doubling up to 5s.
var recordRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}
